package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/runner"
)

var (
	_ runner.Runner = (*Runner)(nil)
	_ runner.Reaper = (*Runner)(nil)
)

// Runner creates local sandboxes. It must run as root.
type Runner struct {
	cfg     Config
	cg      *cgroupHost // nil when cgroups are unusable
	caps    runner.Capabilities
	missing []string // isolation features this host lacks
	landlk  bool
	root    bool // running as uid 0: privileges can be dropped

	mu   sync.Mutex
	live map[string]*Sandbox
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

func (r *Runner) probe() {
	r.root = os.Geteuid() == 0
	if !r.root {
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
	}
	if err := seccompSupported(); err != nil {
		r.missing = append(r.missing, "seccomp ("+err.Error()+")")
	} else {
		r.caps.Seccomp = true
	}
	// Landlock is defence in depth behind read-only mounts: used when
	// present, not required.
	r.landlk = landlockABI() > 0
	r.caps.Landlock = r.landlk
	// NetworkEgress needs the network namespace (no route out).
	r.caps.Network = r.caps.NetNamespace
}

// probeNamespaces starts the helper once with every namespace flag.
func (r *Runner) probeNamespaces() error {
	cmd, cfgW, statR, err := startHelper(r.cfg.HelperPath, nil, nil, nil, cloneFlags)
	if err != nil {
		return err
	}
	_ = json.NewEncoder(cfgW).Encode(helperConfig{Probe: true})
	cfgW.Close()
	// A binary that does not call MaybeHelper first would run its own main
	// instead of the helper: do not wait for it forever.
	t := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	defer t.Stop()
	st, reported, werr := finishHelper(cmd, statR)
	if !reported || !st.Started {
		return fmt.Errorf("probe helper failed (is local.MaybeHelper the first call in main?): %v %s", werr, st.SetupError)
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

const cloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// Name implements runner.Runner.
func (r *Runner) Name() string { return "local" }

var _ runner.ImageNamer = (*Runner)(nil)

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

// Capabilities implements runner.Runner. Network (NetworkEgress) needs the
// network namespace: see egress_linux.go.
func (r *Runner) Capabilities() runner.Capabilities { return r.caps }

// owner is the ownership record in StateDir/<id>/owner.json.
type owner struct {
	PID        int    `json:"pid"`
	Start      string `json:"start"` // /proc/<pid>/stat start time, guards pid reuse
	Cgroup     string `json:"cgroup"`
	Workspace  string `json:"workspace,omitempty"`
	ChownedUID int    `json:"chowned_uid,omitempty"` // workspace owner to restore
	ChownedGID int    `json:"chowned_gid,omitempty"`
	Chowned    bool   `json:"chowned,omitempty"`
}

// Create implements runner.Runner.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (_ runner.Sandbox, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = ids.Short("sbx-")
	}
	if !validName(spec.ID) {
		return nil, fmt.Errorf("create sandbox: id %q: %w", spec.ID, runner.ErrInvalidSpec)
	}
	if err := runner.CheckIsolation(spec); err != nil {
		return nil, err
	}
	iso := spec.Isolation
	if iso.Network == runner.NetworkEgress && !r.caps.Network {
		return nil, fmt.Errorf("create sandbox: network %q needs a network namespace: %w", iso.Network, runner.ErrUnsupported)
	}
	if iso.Workspace != runner.WorkspaceNone {
		if spec.Workspace == "" || !filepath.IsAbs(spec.Workspace) {
			return nil, fmt.Errorf("create sandbox: workspace %q must be an absolute path: %w", spec.Workspace, runner.ErrInvalidSpec)
		}
		if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("create sandbox: workspace %q is not a directory: %w", spec.Workspace, runner.ErrInvalidSpec)
		}
	}
	rootfs := r.cfg.Rootfs
	if spec.Image != "" {
		if !filepath.IsAbs(spec.Image) {
			return nil, fmt.Errorf("create sandbox: image %q must be an absolute rootfs path: %w", spec.Image, runner.ErrInvalidSpec)
		}
		rootfs = spec.Image
	}
	if rootfs != "" {
		if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("create sandbox: image rootfs %q is not a directory: %w", rootfs, runner.ErrInvalidSpec)
		}
	}
	if len(r.missing) > 0 {
		if !r.cfg.AllowWeak {
			return nil, fmt.Errorf("create sandbox: host lacks %s: %w", strings.Join(r.missing, ", "), runner.ErrUnsupported)
		}
		r.cfg.Logger.Warn("local runner: creating a sandbox with weakened isolation (AllowWeak)",
			"sandbox", spec.ID, "missing", strings.Join(r.missing, ", "))
	}
	var filter []byte
	if r.caps.Seccomp {
		f, err := compileSeccomp(iso.Seccomp)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: seccomp profile: %w: %w", err, runner.ErrInvalidSpec)
		}
		filter = f
	}
	limits := mergeLimits(spec.Limits, r.cfg.Defaults)
	s := &Sandbox{
		r:        r,
		spec:     spec,
		limits:   limits,
		rootfs:   rootfs,
		stateDir: filepath.Join(r.cfg.StateDir, spec.ID),
		closing:  make(chan struct{}),
		seccomp:  filter,
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
	own := owner{PID: os.Getpid(), Start: procStart(os.Getpid()), Cgroup: filepath.Join(r.cfg.CgroupParent, spec.ID)}
	if iso.Workspace == runner.WorkspaceReadWrite {
		fi, err := os.Stat(spec.Workspace)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != r.cfg.UID || int(st.Gid) != r.cfg.GID {
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
	if own.Chowned {
		if err := os.Chown(spec.Workspace, r.cfg.UID, r.cfg.GID); err != nil {
			return nil, fmt.Errorf("create sandbox: make workspace writable: %w", err)
		}
	}
	if r.cg != nil {
		s.cg = r.cg.group(own.Cgroup)
		if err := s.cg.create(limits); err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
	}
	if iso.Network == runner.NetworkEgress {
		s.egress = newFanIn()
		eg, id, log := spec.Egress, spec.ID, r.cfg.Logger
		go func() {
			if err := eg.Serve(s.egress); err != nil && !errors.Is(err, net.ErrClosed) {
				log.Warn("local runner: egress proxy stopped", "sandbox", id, "err", err)
			}
		}()
	}
	return s, nil
}

func writeOwner(dir string, o owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "owner.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "owner.json"))
}

// procStart returns field 22 of /proc/<pid>/stat (start time in ticks), or
// "" when the process does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// Reap destroys sandboxes recorded in StateDir whose owning process is gone
// (a previous sandboxd killed with -9), and any record left by this process
// that no open Sandbox holds: it kills their processes, removes their
// cgroups and state dirs and gives rw workspaces their owner back. It
// returns how many it destroyed. Sandboxes of another live process sharing
// the StateDir are left alone.
func (r *Runner) Reap(ctx context.Context) (int, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		r.mu.Lock()
		_, live := r.live[e.Name()]
		r.mu.Unlock()
		if live {
			continue // ours, open (or being created) in this process
		}
		dir := filepath.Join(r.cfg.StateDir, e.Name())
		var own owner
		b, err := os.ReadFile(filepath.Join(dir, "owner.json"))
		if err == nil {
			err = json.Unmarshal(b, &own)
		}
		if err != nil {
			// A crash between mkdir and the record: nothing else exists.
			own = owner{Cgroup: filepath.Join(r.cfg.CgroupParent, e.Name())}
		}
		if own.PID != 0 && own.PID != os.Getpid() && own.Start != "" && procStart(own.PID) == own.Start {
			continue // another live runner process owns it
		}
		if err := r.destroy(dir, own); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// destroy removes everything a sandbox record names.
func (r *Runner) destroy(dir string, own owner) error {
	var errs []error
	if r.cg != nil && own.Cgroup != "" {
		if err := r.cg.group(own.Cgroup).destroy(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if own.Chowned && own.Workspace != "" {
		if err := os.Chown(own.Workspace, own.ChownedUID, own.ChownedGID); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("restore workspace owner: %w", err))
		}
	}
	if len(errs) == 0 && dir != "" {
		// Only empty dirs and our own files live here: every mount was
		// made in a helper's private mount namespace.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startHelper starts the init helper in new namespaces, blocked until its
// config arrives on the returned writer.
func startHelper(path string, stdin io.Reader, stdout, stderr io.Writer, flags uintptr, extra ...*os.File) (cmd *exec.Cmd, cfgW, statR *os.File, err error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, nil, nil, err
	}
	cmd = &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{helperArg0},
		// GORACE: race-enabled builds would otherwise sleep 1s at exit.
		Env:        []string{"GOMAXPROCS=1", "GOTRACEBACK=none", "GORACE=atexit_sleep_ms=0"},
		ExtraFiles: append([]*os.File{cfgR, statW}, extra...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Pdeathsig:  syscall.SIGKILL,
		},
		WaitDelay: 2 * time.Second,
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Start()
	cfgR.Close()
	statW.Close()
	if err != nil {
		cfgW.Close()
		statR.Close()
		return nil, nil, nil, fmt.Errorf("start helper: %w", err)
	}
	return cmd, cfgW, statR, nil
}

// finishHelper waits for the helper and decodes its status. reported is
// false when the helper died without reporting (it was killed); werr then
// describes how it ended.
func finishHelper(cmd *exec.Cmd, statR *os.File) (st helperStatus, reported bool, werr error) {
	werr = cmd.Wait()
	decErr := json.NewDecoder(statR).Decode(&st)
	statR.Close()
	if errors.Is(werr, exec.ErrWaitDelay) {
		werr = nil
	}
	return st, decErr == nil, werr
}
