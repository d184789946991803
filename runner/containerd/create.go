package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Create implements runner.Runner: it creates the container and its task,
// starts it and waits until the agent inside answers. On any failure
// nothing is left behind.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (_ runner.Sandbox, err error) {
	// The ID stays reserved until Close, so the reconcile loop leaves the
	// half-made sandbox alone.
	limits, err := r.host.Reserve(ctx, &spec, r.cfg.Defaults)
	if err != nil {
		return nil, err
	}
	s := newSandbox(r, spec, limits)
	defer func() {
		if err != nil {
			r.host.Abort(ctx, spec.ID, s.destroy)
		}
	}()

	// dir: root's (agent log, netns pin); dir/run: root's too, 0700,
	// mounted at /run/sandboxd (hostside.MakeStateDir). MkdirAll: another
	// instance's Reap may have removed our empty stateRoot.
	os.MkdirAll(r.host.State.Dir, 0o711)
	if err := os.Mkdir(s.dir, 0o711); err != nil {
		return nil, fmt.Errorf("create sandbox: state dir: %w", err)
	}
	if err := hostside.MakeStateDir(s.runDir); err != nil {
		return nil, fmt.Errorf("create sandbox: state dir: %w", err)
	}
	if err := newNetns(s.netns); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if spec.Isolation.Network == runner.NetworkEgress {
		if err := s.listenEgress(); err != nil {
			return nil, fmt.Errorf("create sandbox: egress: %w", err)
		}
	}

	cctx, cancel := context.WithTimeout(ctx, hostside.CreateTimeout)
	defer cancel()
	imageRef := spec.Image
	if imageRef == "" {
		imageRef = r.cfg.Image
	}
	img, err := r.image(cctx, imageRef)
	if err != nil {
		return nil, hostside.CtxOr(ctx, fmt.Errorf("create sandbox: %w", err))
	}
	in := specInput{
		ID: spec.ID, Namespace: r.cfg.Namespace, Spec: spec, Limits: limits,
		AgentPath: r.cfg.AgentPath, RunDir: s.runDir, NetnsPath: s.netns, TmpBytes: r.cfg.TmpBytes,
		GVisor: r.gvisor,
	}
	if spec.Tenant != "" && r.tenants != nil {
		// Under the tenant's group, whose weight (and cap while tenants
		// compete) shares the CPU by tenant; at most the tenant's cap.
		rel, err := r.tenants.Group(spec.Tenant, spec.TenantWeight)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		in.CgroupParent = "/" + rel
		in.Limits.CPUMillis = r.tenants.ChildCPU(spec.Tenant, spec.ID, limits.CPUMillis)
	}
	ociSpec := buildSpec(in)
	labels := r.host.Labels(spec)
	// The sandbox user must be able to write a read-write workspace.
	owner, err := hostside.MarkWorkspace(spec, labels)
	if err != nil {
		return nil, err
	}
	s.labels = labels
	snapLabels := r.host.ObjectLabels(spec.ID)
	// A read-only view of the image: runc creates the mount points in
	// the /run tmpfs. runsc's gofer creates them in the host rootfs, so
	// gVisor gets a writable snapshot that the spec still mounts
	// read-only (Root.Readonly) inside the sandbox.
	snapshot := client.WithNewSnapshotView(spec.ID, img, snapshots.WithLabels(snapLabels))
	if r.gvisor {
		snapshot = client.WithNewSnapshot(spec.ID, img, snapshots.WithLabels(snapLabels))
	}
	ctr, err := r.c.NewContainer(cctx, spec.ID,
		client.WithSnapshotter(r.cfg.Snapshotter),
		snapshot,
		client.WithRuntime(r.runtime, r.rtOpts),
		client.WithSpec(ociSpec),
		client.WithContainerLabels(labels),
	)
	if err != nil {
		r.forgetImage(imageRef) // maybe re-imported since: look it up again
		if errdefs.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create sandbox: id %q already in use in namespace %s: %w: %w", spec.ID, r.cfg.Namespace, runner.ErrInvalidSpec, err)
		}
		return nil, hostside.CtxOr(ctx, r.wrap("create container", err))
	}
	s.container = ctr
	if err := hostside.ChownWorkspace(spec, owner); err != nil {
		return nil, err
	}
	l, err := s.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("create sandbox %s: %w: %w", spec.ID, runner.ErrUnavailable, err)
	}
	s.cur = l
	go s.killOnProtocolError(l)
	return s, nil
}

// listenEgress creates the sandbox's egress socket (EgressSocketPath
// inside) and serves it with spec.Egress until Close.
func (s *Sandbox) listenEgress() error {
	path := filepath.Join(s.runDir, filepath.Base(runner.EgressSocketPath))
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	s.mu.Lock()
	s.egress = ln
	s.mu.Unlock()
	// Only the agent (uid 0) connects: the run dir (0700, root's,
	// mounted only into this sandbox) is closed to the code, which
	// reaches the proxy through the agent.
	go func() {
		if err := s.spec.Egress.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			s.r.cfg.Logger.Warn("containerd runner: egress serve", "sandbox", s.id, "err", err)
		}
	}()
	return nil
}

// dialAgent connects to the agent (hostside.DialAgent), giving up as soon
// as the task exited.
func (s *Sandbox) dialAgent(ctx context.Context, l *life) (*agent.Client, error) {
	return hostside.DialAgent(ctx, filepath.Join(s.runDir, "agent.sock"), hostside.AgentTimeout, func(ctx context.Context, stop func(error)) {
		select {
		case <-ctx.Done():
		case <-l.exited:
			stop(fmt.Errorf("task exited with %d", l.exitStatus.ExitCode()))
		}
	})
}
