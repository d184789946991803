// Package fake is a runner.Runner for unit tests of other packages. It runs
// real host processes with os/exec and provides NO isolation: the command
// sees the host's file system, network, processes and user. Capabilities
// reports every isolation feature as false.
//
// What it does honour, like a real backend: exit codes and signals as data,
// per-Exec and default timeouts, ctx cancellation (SIGKILL to the command's
// process group), the head-and-tail output cap with live streaming writers,
// an exact environment (Process.Env plus a default PATH), stdin, and the
// workspace as the working directory. Because it cannot remap paths,
// the command runs with cwd = SandboxSpec.Workspace (a private temp dir when
// the workspace mode is none), and a Process.Dir under /workspace is mapped
// onto that directory. Processes that leave the process group (setsid) are
// not killed.
//
// Hooks: Runner.CreateErr makes Create fail, Runner.CreateHook runs
// before each Create (it may block or fail it), Runner.ExecFunc replaces
// running a process, and Created/Closed/Execs count calls.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/iox"
	"golang.org/x/sys/unix"
)

var (
	_ runner.Runner  = (*Runner)(nil)
	_ runner.Sandbox = (*Sandbox)(nil)
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultLimits fill the zero limits of a spec.
var DefaultLimits = runner.Limits{Timeout: 60 * time.Second, OutputBytes: 1 << 20}

// Runner is the fake runner. Use New; set the hook
// fields before the first Create.
type Runner struct {
	// CreateErr, when set, is returned by Create.
	CreateErr error
	// CreateHook, when set, runs at the start of each Create; its error
	// fails the Create.
	CreateHook func(ctx context.Context, spec runner.SandboxSpec) error
	// ExecFunc, when set, runs instead of starting a process.
	ExecFunc func(ctx context.Context, sb *Sandbox, p runner.Process) (runner.Result, error)

	created, closed, execs atomic.Int64
	seq                    atomic.Int64

	mu   sync.Mutex
	dirs map[string]string // sandbox ID -> private working dir
}

var cloexecOnce sync.Once

// New returns a fake runner.
//
// Descriptors this process inherited without close-on-exec would leak into
// every command (os/exec passes only 0-2 on purpose but cannot close what
// it does not know); New marks every descriptor above 2 close-on-exec once.
func New() *Runner {
	cloexecOnce.Do(markInheritedCloexec)
	return &Runner{}
}

// Leftovers reports a sandbox's private working dir if it still exists.
func (r *Runner) Leftovers(id string) []string {
	r.mu.Lock()
	dir, ok := r.dirs[id]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	if _, err := os.Stat(dir); err == nil {
		return []string{"dir " + dir}
	}
	return nil
}

// Name implements runner.Runner.
func (r *Runner) Name() string { return "fake" }

// Capabilities implements runner.Runner: no isolation at all.
func (r *Runner) Capabilities() runner.Capabilities { return runner.Capabilities{} }

// Created is how many sandboxes Create returned.
func (r *Runner) Created() int { return int(r.created.Load()) }

// Closed is how many sandboxes were closed (first Close only).
func (r *Runner) Closed() int { return int(r.closed.Load()) }

// Execs is how many Exec calls started.
func (r *Runner) Execs() int { return int(r.execs.Load()) }

// Create implements runner.Runner.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	if r.CreateErr != nil {
		return nil, r.CreateErr
	}
	if r.CreateHook != nil {
		if err := r.CreateHook(ctx, spec); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if iso := spec.Isolation; iso != nil && iso.Network == runner.NetworkEgress {
		return nil, fmt.Errorf("create sandbox: network %q: %w", iso.Network, runner.ErrUnsupported)
	}
	if err := runner.CheckIsolation(spec); err != nil {
		return nil, err
	}
	s := &Sandbox{r: r, spec: spec, closing: make(chan struct{})}
	switch spec.Isolation.Workspace {
	case runner.WorkspaceNone:
		dir, err := os.MkdirTemp("", "fake-sandbox-")
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		s.dir, s.ownDir = dir, true
	default:
		if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() || !filepath.IsAbs(spec.Workspace) {
			return nil, fmt.Errorf("create sandbox: workspace %q: %w", spec.Workspace, runner.ErrInvalidSpec)
		}
		s.dir = spec.Workspace
	}
	if s.spec.ID == "" {
		s.spec.ID = fmt.Sprintf("fake-%d-%d", os.Getpid(), r.seq.Add(1))
	}
	s.limits = spec.Limits
	if s.limits.Timeout <= 0 {
		s.limits.Timeout = DefaultLimits.Timeout
	}
	if s.limits.OutputBytes <= 0 {
		s.limits.OutputBytes = DefaultLimits.OutputBytes
	}
	if s.ownDir {
		r.mu.Lock()
		if r.dirs == nil {
			r.dirs = map[string]string{}
		}
		r.dirs[s.spec.ID] = s.dir
		r.mu.Unlock()
	}
	r.created.Add(1)
	return s, nil
}

// Sandbox is a fake sandbox: a working directory and a set of limits.
type Sandbox struct {
	r      *Runner
	spec   runner.SandboxSpec
	limits runner.Limits
	dir    string
	ownDir bool

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
	usage   runner.Usage
}

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.spec.ID }

// Spec returns the spec the sandbox was created with (defaults applied).
func (s *Sandbox) Spec() runner.SandboxSpec { return s.spec }

// Dir is the host directory commands run in.
func (s *Sandbox) Dir() string { return s.dir }

// Exec implements runner.Sandbox.
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
	s.r.execs.Add(1)
	if s.r.ExecFunc != nil {
		return s.r.ExecFunc(ctx, s, p)
	}
	return s.run(ctx, p)
}

func (s *Sandbox) run(ctx context.Context, p runner.Process) (runner.Result, error) {
	timeout := s.limits.Timeout
	if p.Timeout > 0 {
		timeout = p.Timeout
	}
	env := append([]string(nil), p.Env...)
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	if pathEnv == "" && !hasKey(env, "PATH") {
		env = append(env, defaultPath)
		pathEnv = strings.TrimPrefix(defaultPath, "PATH=")
	}
	dir := s.dir
	if p.Dir != "" {
		dir = p.Dir
		if rest, ok := strings.CutPrefix(p.Dir, runner.WorkspaceDir); ok && (rest == "" || rest[0] == '/') {
			dir = s.dir + rest
		}
	}
	stdout := iox.NewStream(s.limits.OutputBytes, p.Stdout)
	stderr := iox.NewStream(s.limits.OutputBytes, p.Stderr)
	finish := func(res *runner.Result) {
		res.Stdout, res.StdoutTruncated = stdout.Finish(5 * time.Second)
		res.Stderr, res.StderrTruncated = stderr.Finish(5 * time.Second)
	}
	path, err := lookPath(p.Args[0], pathEnv)
	start := time.Now()
	if err != nil {
		fmt.Fprintf(stderr, "fake: %v\n", err)
		res := runner.Result{ExitCode: 127, Duration: time.Since(start)}
		finish(&res)
		return res, nil
	}
	stdin := p.Stdin
	if p.LongLived && stdin != nil { // a stream that may never end: our own pipe
		r, w, err := os.Pipe()
		if err != nil {
			return runner.Result{}, fmt.Errorf("exec: %w", err)
		}
		go func() { _, _ = io.Copy(w, p.Stdin); w.Close() }()
		defer r.Close()
		stdin = r
	}
	cmd := &exec.Cmd{
		Path: path, Args: p.Args, Env: env, Dir: dir,
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay:   time.Second,
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "fake: %v\n", err)
		res := runner.Result{ExitCode: 126, Duration: time.Since(start)}
		finish(&res)
		return res, nil
	}
	pgid := cmd.Process.Pid
	var timedOut, cancelled, closed atomic.Bool
	stop := make(chan struct{})
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire := t.C
		if p.LongLived {
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
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	werr := cmd.Wait()
	close(stop)
	// Whatever is left of the process group dies with the command.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res := runner.Result{Duration: time.Since(start), TimedOut: timedOut.Load()}
	finish(&res)
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("exec: %w", werr)
	}
	if ps := cmd.ProcessState; ps != nil {
		ws := ps.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.Signal = unix.SignalName(ws.Signal())
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = ws.ExitStatus()
		}
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.Usage = runner.Usage{
				CPU:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
				PeakMemory: ru.Maxrss * 1024,
			}
		}
	}
	s.mu.Lock()
	s.usage.CPU += res.Usage.CPU
	s.usage.PeakMemory = max(s.usage.PeakMemory, res.Usage.PeakMemory)
	s.mu.Unlock()
	if cancelled.Load() {
		return res, fmt.Errorf("exec: %w", ctx.Err())
	}
	if closed.Load() {
		return res, fmt.Errorf("exec: %w", runner.ErrClosed)
	}
	return res, nil
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

func lookPath(file, pathEnv string) (string, error) {
	if strings.Contains(file, "/") {
		if _, err := os.Stat(file); err != nil {
			return "", err
		}
		return file, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		p := filepath.Join(d, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", file)
}

// Stats implements runner.Sandbox from the rusage of finished commands.
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return runner.Usage{}, fmt.Errorf("stats: %w", runner.ErrClosed)
	}
	return s.usage, nil
}

// Close implements runner.Sandbox: running commands are killed; a private
// working directory is removed, a caller's workspace is kept.
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
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.r.closed.Add(1)
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("close sandbox: %w", err)
		}
	}
	return nil
}
