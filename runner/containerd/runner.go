// Package containerd is the runner backend that gives each sandbox its own
// containerd container (task) with the sandbox agent as pid 1, mirroring
// the Docker runner.
//
// A sandbox is one container in its own containerd namespace (default
// "sandboxd"): a read-only view snapshot of the image (overlayfs), fresh
// /tmp and /dev/shm, the workspace bound at /workspace (or not at all), no
// capabilities, no_new_privs, the seccomp profile and masked paths the
// spec's isolation carries (policy.Compile decides them), uid 65534, cgroup
// limits, and a network namespace with only loopback (created and brought
// up by the runner, since the sandbox user cannot). The agent binary is bind-mounted read-only from the host and
// talks to sandboxd over a unix socket in a per-sandbox host directory
// (StateDir/<instance>/<id>/run, mounted at /run/sandboxd). Its stdout and
// stderr go to a log file beside it, read only for error messages: every
// Exec, REPL and file operation goes through the agent channel.
//
// Lifecycle: New probes the daemon and the image snapshotter, reaps
// sandboxes left by dead processes and starts the reconcile loop; Create
// returns a started sandbox whose agent answered; Sandbox.Close removes
// the task, the container, its snapshot, its network namespace and state
// dir; Runner.Close stops the reconcile loop and the client (it does not
// close open sandboxes).
package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Runner          = (*Runner)(nil)
	_ runner.Reaper          = (*Runner)(nil)
	_ runner.TenantCPUCapper = (*Runner)(nil)
)

// Runner creates containerd sandboxes. Safe for concurrent use.
type Runner struct {
	cfg     Config
	c       *client.Client
	runtime string // shim name
	rtOpts  any    // shim options (runc options for runsc)
	gvisor  bool
	caps    runner.Capabilities
	// host is what both container runners keep alike: the sandboxes held,
	// the state dir, orphans, the reconcile loop.
	host *hostside.Instance
	// ImageNames implements runner.ImageNamer over cfg.Image.
	hostside.ImageNames

	// tenants are the tenants' parent groups (under the namespace's
	// cgroup), nil when this host's cgroupfs is not writable.
	tenants *hostside.TenantGroups

	mu     sync.Mutex
	images map[string]client.Image // unpacked images by normalized name
}

// CapTenantCPU implements runner.TenantCPUCapper.
func (r *Runner) CapTenantCPU(tenant string, weight int, millis int64) error {
	if r.tenants == nil {
		return nil
	}
	return r.tenants.Cap(tenant, weight, millis)
}

// TenantCgroupDir is the directory holding the tenant's CPU weight and
// cap, "" when tenant groups are off (tests).
func (r *Runner) TenantCgroupDir(tenant string) (dir string, v2 bool) {
	if r.tenants == nil {
		return "", false
	}
	return r.tenants.Dir(tenant), r.tenants.V2
}

// New connects to containerd, checks it and the default image, removes
// orphaned sandboxes and starts the reconcile loop. An unreachable daemon
// is an error wrapping runner.ErrDaemonDown (and so runner.ErrUnavailable).
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c, err := client.New(cfg.Address, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd: client for %q: %w: %w", cfg.Address, runner.ErrDaemonDown, err)
	}
	r := &Runner{cfg: cfg, c: c, images: map[string]client.Image{}, ImageNames: hostside.ImageNames{Default: cfg.Image}}
	if err := r.init(ctx); err != nil {
		if r.host != nil {
			r.host.Close(ctx, func() error { return nil })
		}
		c.Close()
		return nil, err
	}
	return r, nil
}

func (r *Runner) init(ctx context.Context) error {
	switch r.cfg.Runtime {
	case "", "runc", RuntimeRunc:
		r.runtime = RuntimeRunc
	case RuntimeRunsc:
		fi, err := os.Stat(r.cfg.RunscBinary)
		if err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("containerd: runtime runsc: %s is not an executable (run scripts/containerd-setup.sh after installing gVisor): %w", r.cfg.RunscBinary, runner.ErrUnsupported)
		}
		r.runtime, r.rtOpts, r.gvisor = RuntimeRunc, runcOptions(r.cfg.RunscBinary), true
	default:
		r.runtime = r.cfg.Runtime
	}
	// A sandbox's sockets are in its directory's run/.
	var err error
	if r.host, err = hostside.NewInstance("containerd", r.cfg.StateDir, r.cfg.InstanceID, "run", r.cfg.Logger); err != nil {
		return err
	}
	if err := r.probe(ctx); err != nil {
		return err
	}
	r.tenants = hostside.HostTenantGroups(r.cfg.Namespace)
	if _, err := r.Reap(ctx); err != nil {
		r.cfg.Logger.Warn("containerd runner: initial reconcile failed (the reconcile loop retries)", "err", err)
	}
	r.host.StartReconcile(ctx, r.cfg.ReconcileInterval, r.Reap)
	return nil
}

func (r *Runner) probe(ctx context.Context) error {
	if _, err := os.Stat(r.cfg.Address); err != nil {
		return fmt.Errorf("containerd: socket %s: %w: %w", r.cfg.Address, runner.ErrDaemonDown, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.c.Version(cctx); err != nil {
		return r.wrap("version", err)
	}
	if _, err := r.image(cctx, r.cfg.Image); err != nil {
		// Not fatal: a spec may name another image.
		r.cfg.Logger.Warn("containerd runner: default image unusable", "image", r.cfg.Image, "err", err)
	}
	// The isolation this runner sets up is all in the OCI spec that runc
	// (or runsc) enforces; a runtime that cannot refuses to start.
	r.caps = runner.Capabilities{PIDNamespace: true, MountNamespace: true, NetNamespace: true, Cgroups: true, Seccomp: true, Network: true}
	return nil
}

// Name implements runner.Runner.
func (r *Runner) Name() string { return "containerd" }

var (
	_ runner.Dependent  = (*Runner)(nil)
	_ runner.ImageNamer = (*Runner)(nil)
)

// Dependencies implements runner.Dependent: containerd's socket.
func (r *Runner) Dependencies() []string { return []string{"unix://" + r.cfg.Address} }

// Capabilities implements runner.Runner.
func (r *Runner) Capabilities() runner.Capabilities { return r.caps }

// Close stops the reconcile loop and closes the client. Open sandboxes are
// not closed (close them first). Idempotent.
func (r *Runner) Close(ctx context.Context) error { return r.host.Close(ctx, r.c.Close) }

// wrap classifies a containerd error: a daemon that cannot be reached or
// does not answer in time is runner.ErrDaemonDown.
func (r *Runner) wrap(op string, err error) error {
	return hostside.Wrap("containerd", r.cfg.Address, op, err, unavailable)
}

func unavailable(err error) bool {
	err = errgrpc.ToNative(err)
	if errdefs.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errdefs.IsDeadlineExceeded(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such file or directory")
}
