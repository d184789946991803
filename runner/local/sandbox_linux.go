package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/iox"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// flushWait bounds how long Exec waits for a caller's slow streaming writer
// after the process has ended.
const flushWait = 5 * time.Second

var _ runner.Sandbox = (*Sandbox)(nil)

// Sandbox is a local sandbox: a cgroup, a state dir and the settings every
// Exec's fresh namespaces are built from.
type Sandbox struct {
	r        *Runner
	spec     runner.SandboxSpec
	limits   runner.Limits
	rootfs   string
	stateDir string
	owner    owner
	cg       *cgroup // nil without cgroups (AllowWeak)
	egress   *fanIn  // NetworkEgress: every Exec's proxy connections, served by spec.Egress

	mu       sync.Mutex
	closed   bool
	closing  chan struct{} // closed by Close: running Execs are killed
	wg       sync.WaitGroup
	closeErr error
}

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.spec.ID }

// Exec implements runner.Sandbox. Each call runs p in fresh namespaces;
// only the workspace and the cgroup are shared between calls. Cancelling
// ctx kills the tree and returns the result with ctx's error.
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if len(p.Args) == 0 || p.Args[0] == "" {
		return runner.Result{}, fmt.Errorf("exec: empty command: %w", runner.ErrInvalidSpec)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return runner.Result{}, fmt.Errorf("exec: %w", runner.ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	if err := ctx.Err(); err != nil {
		return runner.Result{}, err
	}

	timeout := s.limits.Timeout
	if p.Timeout > 0 {
		timeout = p.Timeout
	}
	cfg := s.helperConfig(p)
	stdout := iox.NewStream(s.limits.OutputBytes, p.Stdout)
	stderr := iox.NewStream(s.limits.OutputBytes, p.Stderr)
	var before counters
	if s.cg != nil {
		s.cg.resetPeak()
		before = s.cg.counters()
	}

	var extra []*os.File
	var egressR *os.File
	if s.egress != nil {
		r, w, err := egressPair()
		if err != nil {
			stdout.Finish(0)
			stderr.Finish(0)
			return runner.Result{}, fmt.Errorf("exec: %w", err)
		}
		egressR, extra = r, []*os.File{w}
	}
	stdin := p.Stdin
	var stdinR *os.File
	if p.LongLived && stdin != nil {
		// A long-lived process's stdin is a stream that may never end:
		// give the helper a pipe fed by our own goroutine, since os/exec
		// would wait for its copying goroutine (blocked reading the
		// stream) after the process died, and the death would go unseen.
		r, w, err := os.Pipe()
		if err != nil {
			stdout.Finish(0)
			stderr.Finish(0)
			return runner.Result{}, fmt.Errorf("exec: %w", err)
		}
		go func() {
			_, _ = io.Copy(w, p.Stdin)
			w.Close()
		}()
		stdin, stdinR = r, r
	}
	start := time.Now()
	cmd, cfgW, statR, err := startHelper(s.r.cfg.HelperPath, stdin, stdout, stderr, s.r.cloneFlags(), extra...)
	if stdinR != nil {
		stdinR.Close() // the helper has its own copy
	}
	for _, f := range extra {
		f.Close()
	}
	if err != nil {
		if egressR != nil {
			egressR.Close()
		}
		stdout.Finish(0)
		stderr.Finish(0)
		return runner.Result{}, fmt.Errorf("exec: %w", err)
	}
	if egressR != nil {
		egressStop := make(chan struct{})
		defer close(egressStop)
		go execEgress(egressR, s.egress, egressStop)
	}
	// The helper blocks on its config: put it into the cgroup first.
	if s.cg != nil {
		if err := s.cg.add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			cfgW.Close()
			finishHelper(cmd, statR)
			stdout.Finish(0)
			stderr.Finish(0)
			return runner.Result{}, fmt.Errorf("exec: %w", err)
		}
	}
	err = json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	if err != nil {
		_ = cmd.Process.Kill()
	}

	var timedOut, cancelled, closed atomic.Bool
	stop := make(chan struct{})
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire := t.C
		if p.LongLived { // served until it exits, ctx ends or the sandbox closes
			expire = nil
		}
		select {
		case <-expire:
			timedOut.Store(true)
		case <-ctx.Done():
			cancelled.Store(true)
		case <-s.closing:
			closed.Store(true)
		case <-stop:
			return
		}
		// SIGKILL to the namespace's init takes down the whole tree.
		_ = cmd.Process.Kill()
	}()
	st, reported, werr := finishHelper(cmd, statR)
	close(stop)
	res := runner.Result{Duration: time.Since(start)}
	res.Stdout, res.StdoutTruncated = stdout.Finish(flushWait)
	res.Stderr, res.StderrTruncated = stderr.Finish(flushWait)
	if s.cg != nil {
		after := s.cg.counters()
		res.Usage = runner.Usage{CPU: after.cpu - before.cpu, PeakMemory: s.cg.peak()}
		res.OOMKilled = after.oomKill > before.oomKill
	}
	res.TimedOut = timedOut.Load()
	killed := res.TimedOut || cancelled.Load() || closed.Load() || res.OOMKilled
	switch {
	case reported && st.SetupError != "":
		if !killed {
			return res, fmt.Errorf("exec: sandbox setup: %s", st.SetupError)
		}
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
	case reported:
		res.ExitCode = st.ExitCode
		if st.Signal != 0 {
			res.Signal = signalName(syscall.Signal(st.Signal))
		}
	case killed:
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
	default:
		// The helper died on its own before reporting: an infrastructure
		// fault (it was not killed by us nor by the OOM killer).
		return res, fmt.Errorf("exec: sandbox helper died: %v", werr)
	}
	if cancelled.Load() {
		return res, fmt.Errorf("exec: %w", ctx.Err())
	}
	if closed.Load() {
		return res, fmt.Errorf("exec: %w", runner.ErrClosed)
	}
	return res, nil
}

func (s *Sandbox) helperConfig(p runner.Process) helperConfig {
	env := append([]string(nil), p.Env...)
	hasPath := false
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
	}
	if !hasPath {
		env = append(env, defaultPath)
	}
	ws := s.spec.WorkspaceMode != runner.WorkspaceNone
	caps := s.r.caps
	dir := p.Dir
	if dir == "" {
		dir = "/"
		if ws {
			dir = runner.WorkspaceDir
		}
	}
	if !caps.MountNamespace && ws {
		// Weak mode (AllowWeak without a mount namespace): /workspace
		// cannot be remapped, so run in the workspace itself.
		if rest, ok := strings.CutPrefix(dir, runner.WorkspaceDir); ok && (rest == "" || rest[0] == '/') {
			dir = s.spec.Workspace + rest
		}
	}
	cfg := helperConfig{
		Mounts:       caps.MountNamespace,
		Root:         s.stateDir + "/root",
		Rootfs:       s.rootfs,
		TmpBytes:     s.r.cfg.TmpBytes,
		Args:         p.Args,
		Env:          env,
		Dir:          dir,
		UID:          s.r.cfg.UID,
		GID:          s.r.cfg.GID,
		NoFile:       uint64(s.limits.NoFile),
		FileSize:     uint64(s.limits.FileSize),
		Seccomp:      s.r.seccomp, // denies inet sockets
		Landlock:     s.r.landlk && caps.MountNamespace,
		SetHostname:  caps.MountNamespace,
		DropBounding: s.r.root,
		SetCreds:     s.r.root,
	}
	if s.egress != nil {
		// Inet sockets so programs reach the proxy on their loopback;
		// the namespace has no other interface and no route.
		cfg.EgressAddr = runner.EgressProxyAddr
		if len(cfg.Seccomp) > 0 {
			cfg.Seccomp = s.r.seccompInet
		}
	}
	if ws {
		cfg.Workspace = s.spec.Workspace
		cfg.WorkspaceRO = s.spec.WorkspaceMode == runner.WorkspaceReadOnly
		cfg.WorkspaceRW = s.spec.WorkspaceMode == runner.WorkspaceReadWrite
	}
	return cfg
}

func (r *Runner) cloneFlags() uintptr {
	if r.caps.PIDNamespace {
		return cloneFlags
	}
	return 0
}

// signalName maps a signal to its conventional name ("SIGKILL").
func signalName(sig syscall.Signal) string {
	if name := unixSignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// Stats implements runner.Sandbox: CPU used and peak memory of the
// sandbox's cgroup (peak since the last Exec started, on cgroup v1).
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return runner.Usage{}, fmt.Errorf("stats: %w", runner.ErrClosed)
	}
	if s.cg == nil {
		return runner.Usage{}, fmt.Errorf("stats: no cgroups: %w", runner.ErrUnsupported)
	}
	return runner.Usage{CPU: s.cg.counters().cpu, PeakMemory: s.cg.peak()}, nil
}

// Close implements runner.Sandbox: it kills every process of the sandbox,
// removes its cgroups and state dir and gives the workspace its owner back.
// The workspace's content is left alone. Close is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	case <-ctx.Done():
	}
	if s.egress != nil {
		s.egress.Close() // Serve returns and closes its connections
	}
	var errs []error
	if s.cg != nil {
		if err := s.cg.destroy(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.r.destroy(s.stateDir, s.owner); err != nil {
		errs = append(errs, err)
	}
	s.r.mu.Lock()
	if s.r.live[s.spec.ID] == s {
		delete(s.r.live, s.spec.ID)
	}
	s.r.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sandbox %s: %w", s.spec.ID, err)
	}
	return nil
}

// Leftovers lists what a sandbox with this ID still holds on the host:
// cgroup directories, processes in them and its state dir. Empty after a
// successful Close. For tests and diagnostics.
func (r *Runner) Leftovers(id string) []string {
	var out []string
	if r.cg != nil {
		g := r.cg.group(r.cfg.CgroupParent + "/" + id)
		for _, pid := range g.procs() {
			out = append(out, fmt.Sprintf("process %d in cgroup", pid))
		}
		for _, d := range g.exists() {
			out = append(out, "cgroup "+d)
		}
	}
	if s := r.cfg.StateDir + "/" + id; pathExists(s) {
		out = append(out, "state dir "+s)
	}
	return out
}
