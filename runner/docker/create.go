package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Create implements runner.Runner: it creates and starts the container and
// waits until the agent inside answers. On any failure nothing is left
// behind.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (_ runner.Sandbox, err error) {
	if !r.caps.Seccomp || !r.caps.Cgroups {
		return nil, fmt.Errorf("create sandbox: daemon at %s lacks seccomp or cgroup limits: %w", r.cfg.Host, runner.ErrUnsupported)
	}
	// The ID stays reserved until Close, so the reconcile loop leaves the
	// half-made sandbox alone.
	limits, err := r.host.Reserve(ctx, &spec, r.cfg.Defaults)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{r: r, id: spec.ID, spec: spec, limits: limits, stateDir: r.host.State.Sandbox(spec.ID)}
	defer func() {
		if err != nil {
			r.host.Abort(ctx, spec.ID, s.destroy)
		}
	}()

	if err := hostside.MakeStateDir(s.stateDir); err != nil {
		return nil, fmt.Errorf("create sandbox: state dir: %w", err)
	}
	if spec.Isolation.Network == runner.NetworkEgress {
		if err := s.startEgress(); err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
	}

	cfg, hc, err := r.containerConfig(spec, limits, s.stateDir)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	// The sandbox user must be able to write a read-write workspace.
	owner, err := hostside.MarkWorkspace(spec, cfg.Labels)
	if err != nil {
		return nil, err
	}
	s.labels = cfg.Labels
	cctx, cancel := context.WithTimeout(ctx, hostside.CreateTimeout)
	defer cancel()
	resp, err := r.api.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: "sandboxd-" + spec.ID})
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("create sandbox: image %q: %w: %w", cfg.Image, runner.ErrInvalidSpec, err)
		}
		return nil, hostside.CtxOr(ctx, r.wrap("create container", err))
	}
	s.containerID = resp.ID
	if err := hostside.ChownWorkspace(spec, owner); err != nil {
		return nil, err
	}
	if _, err := r.api.ContainerStart(cctx, resp.ID, client.ContainerStartOptions{}); err != nil {
		return nil, hostside.CtxOr(ctx, r.wrap("start container", err))
	}
	if insp, err := r.inspect(cctx, resp.ID); err == nil && insp.State != nil {
		s.cg = hostside.FindCgroup(insp.State.Pid) // nil when not readable here
		if s.cg != nil && r.gvisor {
			s.cg.NoStrays = true // runsc's own tasks
		}
	}

	cl, err := r.dialAgent(ctx, s)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("create sandbox %s: agent did not answer: %w: %w\n%s",
			spec.ID, runner.ErrUnavailable, err, r.logsTail(ctx, resp.ID))
	}
	s.client = cl
	go s.killOnProtocolError()
	return s, nil
}

// dialAgent connects to the agent (hostside.DialAgent), giving up as soon
// as the container has exited.
func (r *Runner) dialAgent(ctx context.Context, s *Sandbox) (*agent.Client, error) {
	return hostside.DialAgent(ctx, filepath.Join(s.stateDir, "agent.sock"), hostside.AgentTimeout, func(ctx context.Context, stop func(error)) {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			insp, err := r.inspect(ctx, s.containerID)
			if err == nil && insp.State != nil && !insp.State.Running {
				stop(fmt.Errorf("container exited with %d", insp.State.ExitCode))
				return
			}
		}
	})
}

// containerConfig is the whole isolation of one sandbox.
func (r *Runner) containerConfig(spec runner.SandboxSpec, l runner.Limits, stateDir string) (*container.Config, *container.HostConfig, error) {
	iso := spec.Isolation
	seccomp, err := r.seccompOpt(iso)
	if err != nil {
		return nil, nil, err
	}
	labels := r.host.Labels(spec)
	image := spec.Image
	if image == "" {
		image = r.cfg.Image
	}
	cfg := &container.Config{
		Image:    image,
		User:     fmt.Sprintf("%d:%d", hostside.AgentUID, hostside.AgentGID), // the agent; it runs the code as sandboxUID
		Hostname: "sandbox",
		// env -i: the agent passes its own environment to every process,
		// and Docker always adds HOSTNAME, HOME and the image's ENV.
		Entrypoint: entrypoint(spec),
		Cmd:        nil,
		WorkingDir: "/",
		Labels:     labels,
		Env:        []string{},
	}
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: r.cfg.AgentPath, Target: hostside.AgentBinary, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
		{Type: mount.TypeBind, Source: stateDir, Target: hostside.AgentDir,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
	}
	if iso.Workspace != runner.WorkspaceNone {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: spec.Workspace, Target: runner.WorkspaceDir,
			ReadOnly:    iso.Workspace == runner.WorkspaceReadOnly && !readOnlyMount(spec.Workspace),
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	// /tmp and /dev/shm: size= and nr_inodes= (runner.Limits.Tmpfs).
	// /dev/shm is a tmpfs mount of ours, not Docker's (ShmSize has no
	// inode bound); Docker makes none when one is given.
	size, inodes := l.Tmpfs(r.cfg.TmpBytes)
	tmp := fmt.Sprintf("rw,nosuid,nodev,size=%d,nr_inodes=%d,mode=1777", size, inodes)
	shm := fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,nr_inodes=%d,mode=1777", size, inodes)
	noInit := false
	pids := l.PIDs
	hc := &container.HostConfig{
		NetworkMode:    "none", // NetworkEgress too: the only way out is the egress socket
		IpcMode:        "private",
		Mounts:         mounts,
		Tmpfs:          map[string]string{"/tmp": tmp, "/dev/shm": shm},
		ReadonlyRootfs: true,
		CapAdd:         hostside.AgentCapabilities(), // the agent's; ALL others dropped
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", seccomp},
		MaskedPaths:    append([]string(nil), iso.MaskedPaths...),
		ReadonlyPaths:  append([]string(nil), iso.ReadonlyPaths...),
		Init:           &noInit,
		AutoRemove:     false,
		Runtime:        r.cfg.Runtime,
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Resources: container.Resources{
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes,
			PidsLimit:  &pids,
			NanoCPUs:   l.CPUMillis * 1_000_000,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: l.NoFile, Hard: l.NoFile},
				{Name: "fsize", Soft: l.FileSize, Hard: l.FileSize},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	if hc.CgroupParent, err = r.tenantParent(spec.Tenant, spec.TenantWeight); err != nil {
		return nil, nil, err
	}
	if hc.CgroupParent != "" { // at most the tenant's cap (cgroup v1)
		hc.NanoCPUs = r.tenants.ChildCPU(spec.Tenant, spec.ID, l.CPUMillis) * 1_000_000
	}
	r.applyGVisor(hc, l)
	return cfg, hc, nil
}

// readOnlyMount reports whether dir is on a read-only mount (the
// job service's read-only view of a workspace: ro,nosuid,nodev on the
// host). Docker's bind of it must not ask for "ro" itself: runc (1.1)
// applies that with a remount that sets exactly ro, dropping the
// nosuid,nodev the bind would otherwise inherit.
func readOnlyMount(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// logsTail returns the last lines the container wrote, for error messages.
func (r *Runner) logsTail(ctx context.Context, id string) string {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var state string
	if insp, err := r.inspect(cctx, id); err == nil && insp.State != nil {
		state = fmt.Sprintf("container state %s exit %d oom %v error %q", insp.State.Status, insp.State.ExitCode, insp.State.OOMKilled, insp.State.Error)
	}
	rc, err := r.api.ContainerLogs(cctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return state + "; logs unavailable: " + err.Error()
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		out.WriteString("(" + err.Error() + ")")
	}
	return state + "; logs:\n" + out.String()
}
