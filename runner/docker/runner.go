// Package docker is the runner backend that gives each sandbox its own
// Docker container with the sandbox agent as pid 1.
//
// A sandbox is one container: read-only root, fresh /tmp and /dev/shm,
// the workspace bound at /workspace (or not at all), no capabilities,
// no_new_privs, the seccomp profile and masked paths the spec's isolation
// carries (policy.Compile decides them; seccomp.go), uid 65534, no network (NetworkEgress: still none, plus the agent's proxy
// address forwarded to a per-sandbox egress socket, see egress.go), cgroup
// limits. The agent binary is bind-mounted read-only from the host and
// talks to sandboxd over a unix socket in a per-sandbox host directory
// (StateDir/<id>, mounted at /run/sandboxd).
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
	"sync"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Runner = (*Runner)(nil)
	_ runner.Reaper = (*Runner)(nil)
)

// Labels on every managed container.
const (
	LabelManaged = "sandboxd.managed"
	LabelOwner   = "sandboxd.owner"
	LabelSandbox = "sandboxd.sandbox"
)

// Timeouts of Docker calls: a daemon that does not answer is unavailable,
// never a hang.
const (
	apiTimeout    = 15 * time.Second // inspect, list, stats, logs, ping
	createTimeout = 60 * time.Second // create + start
	removeTimeout = 30 * time.Second
	agentTimeout  = 10 * time.Second // from start until the agent answers a ping
)

// Runner creates Docker sandboxes. Safe for concurrent use.
type Runner struct {
	cfg     Config
	api     dockerAPI
	caps    runner.Capabilities
	started time.Time
	// gvisor: cfg.Runtime is gVisor's runsc. Its sandbox processes live
	// inside the Sentry, invisible on the host: the host pids in the
	// container's cgroup are runsc's own (sandbox, gofer, stubs).
	gvisor bool

	mu   sync.Mutex
	live map[string]*Sandbox // by sandbox ID; nil value: being created

	stop     context.CancelFunc
	loopDone chan struct{}
	closing  sync.Once
}

// New connects to the Docker daemon, checks it, removes orphaned sandboxes
// and starts the reconcile loop. An unreachable daemon is an error wrapping
// runner.ErrUnavailable.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithHost(cfg.Host), client.WithAPIVersionNegotiation())
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
	r := &Runner{cfg: cfg, api: api, live: map[string]*Sandbox{}, started: time.Now()}
	// 0711: the daemon and the sandbox user traverse it; nobody lists it.
	if err := os.MkdirAll(r.stateRoot(), 0o711); err != nil {
		return nil, fmt.Errorf("docker: state dir: %w", err)
	}
	os.Chmod(cfg.StateDir, 0o711)
	if err := r.probe(ctx); err != nil {
		return nil, err
	}
	if _, err := r.Reap(ctx); err != nil {
		cfg.Logger.Warn("docker runner: initial reconcile failed", "err", err)
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.loopDone = stop, make(chan struct{})
	go r.reconcileLoop(loopCtx)
	return r, nil
}

func (r *Runner) probe(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	info, err := r.api.Info(cctx)
	if err != nil {
		return r.wrap("docker info", err)
	}
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

// DefaultImage implements runner.ImageNamer: the configured image.
func (r *Runner) DefaultImage() string {
	if c, err := hostside.CanonicalImageRef(r.cfg.Image); err == nil {
		return c
	}
	return r.cfg.Image
}

// CanonicalImage implements runner.ImageNamer (hostside.CanonicalImageRef).
func (r *Runner) CanonicalImage(image string) (string, error) {
	return hostside.CanonicalImageRef(image)
}

// Dependencies implements runner.Dependent: the Docker daemon's address.
func (r *Runner) Dependencies() []string { return []string{r.cfg.Host} }

// Capabilities implements runner.Runner.
func (r *Runner) Capabilities() runner.Capabilities { return r.caps }

// Close stops the reconcile loop and releases the Docker client. Open
// sandboxes are not closed (close them first). Idempotent.
func (r *Runner) Close(ctx context.Context) error {
	var err error
	r.closing.Do(func() {
		if r.stop != nil {
			r.stop()
			select {
			case <-r.loopDone:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if cerr := r.api.Close(); cerr != nil && err == nil {
			err = cerr
		}
	})
	return err
}

// wrap classifies a Docker error: a daemon that cannot be reached or does
// not answer in time is runner.ErrUnavailable.
func (r *Runner) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if unavailable(err) {
		return fmt.Errorf("docker: %s: daemon at %s unavailable: %w: %w", op, r.cfg.Host, runner.ErrUnavailable, err)
	}
	return fmt.Errorf("docker: %s: %w", op, err)
}

func unavailable(err error) bool {
	if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
