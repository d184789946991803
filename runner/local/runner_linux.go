package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/local/launch"
)

var (
	_ runner.Runner          = (*Runner)(nil)
	_ runner.Reaper          = (*Runner)(nil)
	_ runner.TenantCPUCapper = (*Runner)(nil)
	_ runner.ImageNamer      = (*Runner)(nil)
)

// Runner creates local sandboxes. It must run as root.
type Runner struct {
	cfg     Config
	cg      *cgroupHost // nil when cgroups are unusable
	caps    runner.Capabilities
	missing []string // isolation features this host lacks

	mu   sync.Mutex
	live map[string]*Sandbox

	tenants *hostside.TenantGroups // nil when cgroups are unusable
}

// New probes the host and returns a runner. It fails only on bad
// configuration or an unusable state dir; missing isolation features are
// reported by Capabilities and refused by Create (unless AllowWeak).
func New(cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("local: state dir: %w", err)
	}
	if cfg.Rootfs != "" {
		if fi, err := os.Stat(cfg.Rootfs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("local: Rootfs %q is not a directory", cfg.Rootfs)
		}
	}
	r := &Runner{cfg: cfg, live: map[string]*Sandbox{}}
	r.probe()
	return r, nil
}

// TenantGroupDirs are the directories of a tenant's parent cgroup that
// hold its CPU weight and cap (tests).
func (r *Runner) TenantGroupDirs(tenant string) (cpu string, v2 bool) {
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

func (r *Runner) probe() {
	if os.Geteuid() != 0 {
		r.missing = append(r.missing, "root (the local runner needs uid 0)")
	} else if err := r.probeNamespaces(); err != nil {
		r.missing = append(r.missing, "namespaces ("+err.Error()+")")
		r.cfg.Logger.Warn("local runner: namespaces unavailable", "err", err)
	} else {
		r.caps.PIDNamespace, r.caps.NetNamespace, r.caps.MountNamespace = true, true, true
	}
	if h, err := detectCgroups(); err != nil {
		r.missing = append(r.missing, "cgroups ("+err.Error()+")")
	} else if err := probeCgroup(h, r.cfg.CgroupParent); err != nil {
		r.missing = append(r.missing, "cgroups ("+err.Error()+")")
	} else {
		r.cg, r.caps.Cgroups = h, true
		root := h.root2
		if !h.v2 {
			root = h.v1[cgroup1.Cpu]
		}
		r.tenants = &hostside.TenantGroups{Root: root, V2: h.v2, Parent: r.cfg.CgroupParent}
	}
	if err := seccompSupported(); err != nil {
		r.missing = append(r.missing, "seccomp ("+err.Error()+")")
	} else {
		r.caps.Seccomp = true
	}
	// Landlock is defence in depth behind read-only mounts: used when
	// present, not required.
	if v, err := llsys.LandlockGetABIVersion(); err == nil && v > 0 {
		r.caps.Landlock = true
	}
	// NetworkEgress needs the network namespace (no route out).
	r.caps.Network = r.caps.NetNamespace
}

// probeNamespaces starts the launcher once, in every namespace, in probe
// mode.
func (r *Runner) probeNamespaces() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := startLauncher(ctx, r.cfg.LauncherPath, launch.Config{Probe: true}, nil, nil)
	if err != nil {
		return err
	}
	if err := l.wait(ctx); err != nil {
		return fmt.Errorf("probe %s: %w", r.cfg.LauncherPath, err)
	}
	return nil
}

func probeCgroup(h *cgroupHost, parent string) error {
	g := h.group(filepath.Join(parent, "probe-"+strconv.Itoa(os.Getpid())))
	if err := g.create(builtinDefaults); err != nil {
		_ = g.destroy(time.Second)
		return err
	}
	return g.destroy(time.Second)
}

// Name implements runner.Runner.
func (r *Runner) Name() string { return "local" }

// DefaultImage implements runner.ImageNamer: the configured Rootfs, ""
// for the read-only view of the host.
func (r *Runner) DefaultImage() string { return r.cfg.Rootfs }

// CanonicalImage implements runner.ImageNamer: a local image is an
// absolute rootfs directory, written clean.
func (r *Runner) CanonicalImage(image string) (string, error) {
	if !filepath.IsAbs(image) || strings.ContainsRune(image, 0) {
		return "", fmt.Errorf("image %q must be an absolute rootfs path: %w", image, runner.ErrInvalidSpec)
	}
	return filepath.Clean(image), nil
}

// Capabilities implements runner.Runner.
func (r *Runner) Capabilities() runner.Capabilities { return r.caps }

// Create implements runner.Runner: it records the sandbox's owner, makes
// its cgroup, starts the launcher, which builds the isolation and execs
// the agent, and returns once the agent answers. On failure nothing is
// left behind.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (_ runner.Sandbox, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := hostside.CheckSpec(&spec); err != nil {
		return nil, err
	}
	iso := spec.Isolation
	if iso.Network == runner.NetworkEgress && !r.caps.Network {
		return nil, fmt.Errorf("create sandbox: network %q needs a network namespace: %w", iso.Network, runner.ErrUnsupported)
	}
	rootfs := r.cfg.Rootfs
	if spec.Image != "" {
		if rootfs, err = r.CanonicalImage(spec.Image); err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
	}
	if rootfs != "" {
		if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("create sandbox: image rootfs %q is not a directory: %w", rootfs, runner.ErrInvalidSpec)
		}
	}
	if len(r.missing) > 0 {
		if !r.cfg.AllowWeak || !r.caps.MountNamespace {
			return nil, fmt.Errorf("create sandbox: host lacks %s: %w", strings.Join(r.missing, ", "), runner.ErrUnsupported)
		}
		r.cfg.Logger.Warn("local runner: creating a sandbox with weakened isolation (AllowWeak)",
			"sandbox", spec.ID, "missing", strings.Join(r.missing, ", "))
	}
	var filter []byte
	if r.caps.Seccomp {
		if filter, err = compileSeccomp(iso.Seccomp); err != nil {
			return nil, fmt.Errorf("create sandbox: seccomp profile: %w: %w", err, runner.ErrInvalidSpec)
		}
	}
	s := &Sandbox{
		r:        r,
		spec:     spec,
		limits:   hostside.MergeLimits(spec.Limits, r.cfg.Defaults),
		stateDir: filepath.Join(r.cfg.StateDir, spec.ID),
	}
	r.mu.Lock()
	if _, dup := r.live[spec.ID]; dup {
		r.mu.Unlock()
		return nil, fmt.Errorf("create sandbox: id %q already in use: %w", spec.ID, runner.ErrInvalidSpec)
	}
	r.live[spec.ID] = s
	r.mu.Unlock()
	defer func() {
		if err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}()

	// Record ownership before creating anything, so a crash at any later
	// point leaves a record for Reap.
	if err := os.Mkdir(s.stateDir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			s.stateDir = "" // not ours: never remove it
			return nil, fmt.Errorf("create sandbox: id %q already in use: %w", spec.ID, runner.ErrInvalidSpec)
		}
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	own := owner{PID: os.Getpid(), Start: procStart(os.Getpid()), Cgroup: filepath.Join(r.cfg.CgroupParent, spec.ID), Replica: spec.Replica}
	if r.cg != nil && spec.Tenant != "" {
		// Under the tenant's group, whose weight shares the CPU by tenant.
		tg, err := r.tenants.Group(spec.Tenant, spec.TenantWeight)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		own.Cgroup = filepath.Join(tg, spec.ID)
	}
	if iso.Workspace == runner.WorkspaceReadWrite {
		fi, err := os.Stat(spec.Workspace)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != hostside.SandboxUID || st.Gid != hostside.SandboxUID {
			own.Workspace, own.Chowned, own.ChownedUID, own.ChownedGID = spec.Workspace, true, int(st.Uid), int(st.Gid)
		}
	}
	if err := writeOwner(s.stateDir, own); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	s.owner = own
	if err := os.Mkdir(filepath.Join(s.stateDir, "root"), 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if err := hostside.MakeStateDir(s.runDir()); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if own.Chowned {
		if err := os.Chown(spec.Workspace, hostside.SandboxUID, hostside.SandboxUID); err != nil {
			return nil, fmt.Errorf("create sandbox: make workspace writable: %w", err)
		}
	}
	if r.cg != nil {
		s.cg = r.cg.group(own.Cgroup)
		limits := s.limits
		if spec.Tenant != "" { // at most the tenant's cap (cgroup v1)
			limits.CPUMillis = r.tenants.ChildCPU(spec.Tenant, spec.ID, limits.CPUMillis)
		}
		if err := s.cg.create(limits); err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
	}
	if iso.Network == runner.NetworkEgress {
		ln, err := hostside.ServeEgress(filepath.Join(s.runDir(), filepath.Base(runner.EgressSocketPath)), spec.Egress, r.cfg.Logger, spec.ID)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: egress: %w", err)
		}
		s.egress = ln
	}
	if err := s.start(ctx, rootfs, filter); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("create sandbox %s: %w: %w", spec.ID, runner.ErrUnavailable, err)
	}
	return s, nil
}
