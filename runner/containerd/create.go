package containerd

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := hostside.CheckSpec(&spec); err != nil {
		return nil, err
	}
	limits := hostside.MergeLimits(spec.Limits, r.cfg.Defaults)

	// Reserve the ID so the reconcile loop leaves the half-made sandbox alone.
	r.mu.Lock()
	if _, dup := r.live[spec.ID]; dup {
		r.mu.Unlock()
		return nil, fmt.Errorf("create sandbox: id %q already in use: %w", spec.ID, runner.ErrInvalidSpec)
	}
	r.live[spec.ID] = nil
	r.mu.Unlock()

	s := newSandbox(r, spec, limits)
	defer func() {
		if err != nil {
			if cerr := s.destroy(ctx); cerr != nil {
				r.cfg.Logger.Warn("containerd runner: cleanup after failed create", "sandbox", spec.ID, "err", cerr)
			}
			r.forget(spec.ID)
		}
	}()

	// dir: root's (agent log, netns pin); dir/run: root's too, 0700,
	// mounted at /run/sandboxd (hostside.MakeStateDir). MkdirAll: another
	// instance's Reap may have removed our empty stateRoot.
	os.MkdirAll(r.stateRoot(), 0o711)
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

	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	imageRef := spec.Image
	if imageRef == "" {
		imageRef = r.cfg.Image
	}
	img, err := r.image(cctx, imageRef)
	if err != nil {
		return nil, hostside.CtxOr(ctx, fmt.Errorf("create sandbox: %w", err))
	}
	ociSpec := buildSpec(specInput{
		ID: spec.ID, Namespace: r.cfg.Namespace, Spec: spec, Limits: limits,
		AgentPath: r.cfg.AgentPath, RunDir: s.runDir, NetnsPath: s.netns, TmpBytes: r.cfg.TmpBytes,
		GVisor: r.gvisor,
	})
	labels := r.labels(spec)
	// The sandbox user must be able to write a read-write workspace.
	owner, err := hostside.WorkspaceOwner(spec)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: workspace: %w", err)
	}
	if owner != "" {
		labels[hostside.LabelWorkspace], labels[hostside.LabelWorkspaceOwner] = spec.Workspace, owner
		s.labels = labels
	}
	snapLabels := map[string]string{LabelManaged: "true", LabelOwner: r.cfg.InstanceID, LabelSandbox: spec.ID}
	if hostside.SelfProc() != "" {
		snapLabels[hostside.LabelOwnerProc] = hostside.SelfProc()
	}
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
	if owner != "" {
		if err := os.Chown(spec.Workspace, sandboxUID, sandboxUID); err != nil {
			return nil, fmt.Errorf("create sandbox: make workspace writable: %w", err)
		}
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

	r.mu.Lock()
	r.live[spec.ID] = s
	r.mu.Unlock()
	return s, nil
}

// labels are the container's labels: the spec's plus the runner's.
func (r *Runner) labels(spec runner.SandboxSpec) map[string]string {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManaged] = "true"
	labels[LabelOwner] = r.cfg.InstanceID
	if hostside.SelfProc() != "" {
		labels[hostside.LabelOwnerProc] = hostside.SelfProc()
	}
	labels[LabelSandbox] = spec.ID
	return labels
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
	return hostside.DialAgent(ctx, filepath.Join(s.runDir, "agent.sock"), agentTimeout, func(ctx context.Context, stop func(error)) {
		select {
		case <-ctx.Done():
		case <-l.exited:
			stop(fmt.Errorf("task exited with %d", l.exitStatus.ExitCode()))
		}
	})
}
