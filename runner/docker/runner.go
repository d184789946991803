// Package docker is the runner backend that gives each sandbox its own
// Docker container with the sandbox agent as pid 1.
//
// A sandbox is one container: read-only root, fresh /tmp and /dev/shm,
// the workspace bound at /workspace (or not at all), no capabilities,
// no_new_privs, the seccomp profile and masked paths the spec's isolation
// carries (policy.Compile decides them; seccomp.go), uid 65534, no network
// (NetworkEgress: still none, plus the agent's proxy address forwarded to
// a per-sandbox egress socket, see egress.go), cgroup limits. The agent binary is bind-mounted read-only from the host and
// talks to sandboxd over a unix socket in a per-sandbox host directory
// (StateDir/<instance>/<id>, mounted at /run/sandboxd).
//
// Lifecycle: New probes the daemon, reaps containers left by earlier
// processes and starts the reconcile loop; Create returns a started
// sandbox whose agent answered; Sandbox.Close removes the container and
// its state dir; Runner.Close stops the reconcile loop (it does not close
// open sandboxes).
package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Runner          = (*Runner)(nil)
	_ runner.Reaper          = (*Runner)(nil)
	_ runner.TenantCPUCapper = (*Runner)(nil)
)

// Runner creates Docker sandboxes. Safe for concurrent use.
type Runner struct {
	cfg  Config
	api  dockerAPI
	caps runner.Capabilities
	// host is what both container runners keep alike: the sandboxes held,
	// the state dir, orphans, the reconcile loop.
	host *hostside.Instance
	// ImageNames implements runner.ImageNamer over cfg.Image.
	hostside.ImageNames
	// gvisor: cfg.Runtime is gVisor's runsc. Its sandbox processes live
	// inside the Sentry, invisible on the host: the host pids in the
	// container's cgroup are runsc's own (sandbox, gofer, stubs).
	gvisor bool
	// tenants are the tenants' parent groups, nil when the daemon's
	// cgroups are not this host's cgroupfs (SandboxSpec.Tenant is then
	// ignored).
	tenants *hostside.TenantGroups
}

// tenantParent makes the tenant's parent cgroup with its CPU weight (once
// per tenant and weight) and returns it as --cgroup-parent; "" when
// tenant groups are off.
func (r *Runner) tenantParent(tenant string, weight int) (string, error) {
	if tenant == "" || r.tenants == nil {
		return "", nil
	}
	rel, err := r.tenants.Group(tenant, weight)
	if err != nil {
		return "", err
	}
	return "/" + rel, nil
}

// TenantCgroupDir is the directory holding the tenant's CPU weight and
// cap, "" when tenant groups are off (tests).
func (r *Runner) TenantCgroupDir(tenant string) (dir string, v2 bool) {
	if r.tenants == nil {
		return "", false
	}
	return r.tenants.Dir(tenant), r.tenants.V2
}

// CapTenantCPU implements runner.TenantCPUCapper.
func (r *Runner) CapTenantCPU(tenant string, weight int, millis int64) error {
	if r.tenants == nil {
		return nil
	}
	return r.tenants.Cap(tenant, weight, millis)
}

// New connects to the Docker daemon, checks it, removes orphaned sandboxes
// and starts the reconcile loop. An unreachable daemon is an error wrapping
// runner.ErrDaemonDown.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// The client negotiates the API version with the daemon at its first
	// request (down to this host's dockerd 20.10, API 1.41), unless
	// DOCKER_API_VERSION fixes one.
	api, err := client.New(client.FromEnv, client.WithHost(cfg.Host))
	if err != nil {
		return nil, fmt.Errorf("docker: client for %q: %w", cfg.Host, err)
	}
	r, err := newRunner(ctx, cfg, api)
	if err != nil {
		api.Close()
		return nil, err
	}
	return r, nil
}

// newRunner is New with an injected API (unit tests use a fake).
func newRunner(ctx context.Context, cfg Config, api dockerAPI) (*Runner, error) {
	r := &Runner{cfg: cfg, api: api, ImageNames: hostside.ImageNames{Default: cfg.Image}}
	var err error
	if r.host, err = hostside.NewInstance("docker", cfg.StateDir, cfg.InstanceID, "", cfg.Logger); err != nil {
		return nil, err
	}
	if err := r.probe(ctx); err != nil {
		r.host.Close(ctx, func() error { return nil })
		return nil, err
	}
	if _, err := r.Reap(ctx); err != nil {
		cfg.Logger.Warn("docker runner: initial reconcile failed (the reconcile loop retries)", "err", err)
	}
	r.host.StartReconcile(ctx, cfg.ReconcileInterval, r.Reap)
	return r, nil
}

func (r *Runner) probe(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	res, err := r.api.Info(cctx, client.InfoOptions{})
	if err != nil {
		return r.wrap("docker info", err)
	}
	info := res.Info
	// Network: NetworkEgress through the egress socket (egress.go).
	r.caps = runner.Capabilities{PIDNamespace: true, MountNamespace: true, NetNamespace: true, Network: true}
	for _, opt := range info.SecurityOptions {
		if opt == "seccomp" || strings.HasPrefix(opt, "name=seccomp") {
			r.caps.Seccomp = true
		}
	}
	r.caps.Cgroups = info.MemoryLimit && info.PidsLimit && info.CPUCfsQuota
	if !r.caps.Seccomp {
		r.cfg.Logger.Warn("docker runner: daemon has no seccomp support; sandboxes cannot be created", "security_options", info.SecurityOptions)
	}
	if !r.caps.Cgroups {
		r.cfg.Logger.Warn("docker runner: daemon lacks memory, pids or CPU limits; sandboxes cannot be created")
	}
	// Tenants' parent cgroups: written by sandboxd where the daemon's
	// cgroupfs is this host's.
	switch {
	case info.CgroupDriver != "cgroupfs":
		r.cfg.Logger.Info("docker runner: no tenant CPU groups (the daemon's cgroup driver is not cgroupfs)", "driver", info.CgroupDriver)
	case info.CgroupVersion == "2" && fileExists("/sys/fs/cgroup/cgroup.controllers"):
		r.tenants = &hostside.TenantGroups{Root: "/sys/fs/cgroup", V2: true, Parent: r.cfg.CgroupParent}
	case info.CgroupVersion != "2" && fileExists("/sys/fs/cgroup/cpu/cpu.shares"):
		r.tenants = &hostside.TenantGroups{Root: "/sys/fs/cgroup/cpu", Parent: r.cfg.CgroupParent}
	default:
		r.cfg.Logger.Info("docker runner: no tenant CPU groups (the daemon's cgroups are not under this host's /sys/fs/cgroup)")
	}
	if r.cfg.Runtime != "" {
		rt, ok := info.Runtimes[r.cfg.Runtime]
		if !ok {
			return fmt.Errorf("docker: runtime %q not registered with the daemon: %w", r.cfg.Runtime, runner.ErrUnsupported)
		}
		r.gvisor = isGVisor(r.cfg.Runtime, rt.Path)
	}
	return nil
}

// Name implements runner.Runner.
func (r *Runner) Name() string { return "docker" }

var (
	_ runner.Dependent  = (*Runner)(nil)
	_ runner.ImageNamer = (*Runner)(nil)
)

// inspect is ContainerInspect's container.
func (r *Runner) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	res, err := r.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return res.Container, err
}

// Dependencies implements runner.Dependent: the Docker daemon's address.
func (r *Runner) Dependencies() []string { return []string{r.cfg.Host} }

// Capabilities implements runner.Runner.
func (r *Runner) Capabilities() runner.Capabilities { return r.caps }

// Close stops the reconcile loop and releases the Docker client. Open
// sandboxes are not closed (close them first). Idempotent.
func (r *Runner) Close(ctx context.Context) error { return r.host.Close(ctx, r.api.Close) }

// wrap classifies a Docker error: a daemon that cannot be reached or does
// not answer in time is runner.ErrDaemonDown.
func (r *Runner) wrap(op string, err error) error {
	return hostside.Wrap("docker", r.cfg.Host, op, err, unavailable)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func unavailable(err error) bool {
	if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
