package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/iox"
)

var (
	_ runner.Sandbox      = (*Sandbox)(nil)
	_ runner.AgentSandbox = (*Sandbox)(nil)
)

// maxStdin bounds Process.Stdin: it travels in one agent frame.
const maxStdin = 4 << 20

// Sandbox is one containerd container whose task runs the agent as pid 1.
type Sandbox struct {
	r       *Runner
	id      string
	spec    runner.SandboxSpec
	limits  runner.Limits
	dir     string // host state: StateDir/<instance>/<id>
	runDir  string // dir/run, mounted at /run/sandboxd
	netns   string // dir/netns, the pinned network namespace
	logPath string // dir/agent.log, the agent's stdout and stderr

	container client.Container
	labels    map[string]string // set when the workspace was chowned

	mu       sync.Mutex
	cur      *life         // nil until started
	egress   net.Listener  // NetworkEgress: the egress socket's listener
	reviving chan struct{} // non-nil while a gVisor revive runs
	inflight int
	closed   bool
	done     chan struct{} // closed when Close has finished
}

func newSandbox(r *Runner, spec runner.SandboxSpec, limits runner.Limits) *Sandbox {
	dir := filepath.Join(r.stateRoot(), spec.ID)
	return &Sandbox{
		r: r, id: spec.ID, spec: spec, limits: limits,
		dir: dir, runDir: filepath.Join(dir, "run"), netns: filepath.Join(dir, "netns"), logPath: filepath.Join(dir, "agent.log"),
	}
}

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.id }

// Agent returns the connection to the sandbox agent, for REPL and file
// operations. It is closed by Close.
// A gVisor sandbox that hit its memory limit is restarted with a new
// agent: call Agent again after an Exec reported OOMKilled.
func (s *Sandbox) Agent() *agent.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil
	}
	return s.cur.client
}

// life returns the current life, waiting for a revive in progress.
func (s *Sandbox) life(ctx context.Context) (*life, error) {
	s.mu.Lock()
	ch := s.reviving
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, nil
}

// NetnsPath is the host path of the sandbox's network namespace.
func (s *Sandbox) NetnsPath() string { return s.netns }

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Exec implements runner.Sandbox: the agent runs the process.
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if s.isClosed() {
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.id, runner.ErrClosed)
	}
	if len(p.Args) == 0 || p.Args[0] == "" {
		return runner.Result{}, fmt.Errorf("exec: empty Args: %w", runner.ErrInvalidSpec)
	}
	if p.Timeout < 0 {
		return runner.Result{}, fmt.Errorf("exec: negative timeout %v: %w", p.Timeout, runner.ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return runner.Result{}, err
	}
	req := agent.ExecRequest{
		Args:        p.Args,
		Env:         p.Env,
		Dir:         p.Dir,
		Timeout:     p.Timeout,
		OutputLimit: s.limits.OutputBytes,
	}
	if req.Timeout == 0 {
		req.Timeout = s.limits.Timeout
	}
	if req.Env == nil {
		req.Env = []string{}
	}
	if req.Dir == "" {
		req.Dir = "/"
		if s.spec.WorkspaceMode != runner.WorkspaceNone {
			req.Dir = runner.WorkspaceDir
		}
	}
	if p.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(p.Stdin, maxStdin+1))
		if err != nil {
			return runner.Result{}, fmt.Errorf("exec: read stdin: %w", err)
		}
		if len(b) > maxStdin {
			return runner.Result{}, fmt.Errorf("exec: stdin larger than %d bytes: %w", maxStdin, runner.ErrInvalidSpec)
		}
		req.Stdin = b
	}
	var onOutput func(string, []byte)
	live := p.Stdout != nil || p.Stderr != nil
	if live {
		// The agent streams only what it keeps: ask it to keep its
		// maximum so live writers see the whole output, and cap the
		// result here.
		req.OutputLimit = max(req.OutputLimit, agent.MaxOutputLimit)
		onOutput = func(stream string, chunk []byte) {
			switch {
			case stream == "stdout" && p.Stdout != nil:
				p.Stdout.Write(chunk)
			case stream == "stderr" && p.Stderr != nil:
				p.Stderr.Write(chunk)
			}
		}
	}

	l, err := s.life(ctx)
	if err != nil {
		return runner.Result{}, err
	}
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	before := l.cg.sample()
	ar, err := l.client.Exec(ctx, req, onOutput)
	after := l.cg.sample()
	s.endExec(l)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return runner.Result{}, ctx.Err()
		case s.isClosed():
			return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.id, runner.ErrClosed)
		}
		var re *agent.RemoteError
		if errors.As(err, &re) {
			return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w", s.id, runner.ErrInvalidSpec, err)
		}
		if l.hasExited(2*time.Second) && l.cg.sample().oomKills > before.oomKills {
			// The OOM killer took the agent itself (under gVisor: the
			// whole sandbox): the process's fate is a result. A gVisor
			// sandbox restarts; otherwise later Execs fail.
			if s.r.gvisor {
				s.startRevive(l)
			}
			return runner.Result{ExitCode: 128 + int(syscall.SIGKILL), Signal: "SIGKILL", OOMKilled: true,
				Stdout: []byte{}, Stderr: []byte{}, Usage: runner.Usage{PeakMemory: after.peak}}, nil
		}
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w%s", s.id, runner.ErrUnavailable, err, l.deathNote())
	}
	res := runner.Result{
		ExitCode:        ar.ExitCode,
		Signal:          signalName(ar.Signal),
		TimedOut:        ar.TimedOut,
		Stdout:          ar.Stdout,
		Stderr:          ar.Stderr,
		StdoutTruncated: ar.StdoutTruncated,
		StderrTruncated: ar.StderrTruncated,
		Duration:        ar.Duration,
	}
	if live && req.OutputLimit > s.limits.OutputBytes {
		res.Stdout, res.StdoutTruncated = recap(res.Stdout, res.StdoutTruncated, s.limits.OutputBytes)
		res.Stderr, res.StderrTruncated = recap(res.Stderr, res.StderrTruncated, s.limits.OutputBytes)
	}
	if res.Stdout == nil {
		res.Stdout = []byte{}
	}
	if res.Stderr == nil {
		res.Stderr = []byte{}
	}
	if sig := int(unix.SignalNum(res.Signal)); sig != 0 && res.ExitCode <= 0 {
		res.ExitCode = 128 + sig
	}
	if l.cg != nil {
		res.OOMKilled = res.Signal == "SIGKILL" && !res.TimedOut && after.oomKills > before.oomKills
		res.Usage = runner.Usage{CPU: after.cpu - before.cpu, PeakMemory: after.peak}
	}
	return res, nil
}

// killOnProtocolError kills the task when its agent broke the protocol: a
// sandbox that speaks garbage is not trusted with another request. The
// owner still calls Close.
func (s *Sandbox) killOnProtocolError(l *life) {
	<-l.client.Done()
	if !errors.Is(l.client.Err(), agent.ErrProtocol) || s.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	s.r.cfg.Logger.Warn("containerd runner: agent broke the protocol; killing its sandbox", "sandbox", s.id, "err", l.client.Err())
	if err := l.task.Kill(ctx, unix.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		s.r.cfg.Logger.Warn("containerd runner: kill sandbox", "sandbox", s.id, "err", err)
	}
}

// endExec kills processes that escaped the agent's session once no Exec
// runs: nothing an Exec started outlives it, daemons included.
func (s *Sandbox) endExec(l *life) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && !s.closed && s.cur == l {
		if n := l.cg.killStrays(); n > 0 {
			s.r.cfg.Logger.Debug("containerd runner: killed processes that left the agent's session", "sandbox", s.id, "count", n)
		}
	}
}

// Stats implements runner.Sandbox from the task's cgroup.
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	if s.isClosed() {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: %w", s.id, runner.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return runner.Usage{}, err
	}
	l, err := s.life(ctx)
	if err != nil {
		return runner.Usage{}, err
	}
	if l.cg == nil {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: cgroup not readable on this host: %w", s.id, runner.ErrUnavailable)
	}
	smp := l.cg.sample()
	return runner.Usage{CPU: smp.cpu, PeakMemory: smp.peak}, nil
}

// Close implements runner.Sandbox: it closes the agent connection (the
// agent kills what it runs), kills and deletes the task, deletes the
// container with its snapshot, the network namespace and the state dir.
// Idempotent; later calls wait for the first and return nil. Cleanup runs
// even if ctx is cancelled, bounded by its own timeout.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		done := s.done
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	s.closed = true
	s.done = make(chan struct{})
	reviving := s.reviving
	s.mu.Unlock()
	if reviving != nil {
		// It sees closed when done and stops what it started.
		<-reviving
	}

	err := s.destroy(ctx)
	s.r.forget(s.id)
	close(s.done)
	if err != nil {
		s.r.cfg.Logger.Warn("containerd runner: close sandbox (the reconcile loop retries)", "sandbox", s.id, "err", err)
	}
	return err
}

// destroy removes everything the sandbox has on the host.
func (s *Sandbox) destroy(ctx context.Context) error {
	var errs []error
	s.mu.Lock()
	l, egress := s.cur, s.egress
	s.mu.Unlock()
	if egress != nil {
		egress.Close()
	}
	if l != nil {
		if err := l.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if s.container != nil {
		if err := s.container.Delete(cctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, s.r.wrap("delete container", err))
		}
	}
	if err := removeNetns(s.netns); err != nil {
		errs = append(errs, err)
	}
	if err := restoreWorkspace(s.labels); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("containerd: remove state dir: %w", err))
	}
	return errors.Join(errs...)
}

// recap caps output at limit bytes, keeping head and tail.
func recap(b []byte, truncated bool, limit int64) ([]byte, bool) {
	if int64(len(b)) <= limit {
		return b, truncated
	}
	c := iox.NewCapture(limit)
	c.Write(b)
	out, _ := c.Bytes()
	return out, true
}

// signalName turns the agent's signal description ("killed", "SIGKILL",
// "9") into the runner's form ("SIGKILL").
func signalName(s string) string {
	if s == "" {
		return ""
	}
	if n := unix.SignalNum(s); n != 0 {
		return s
	}
	for i := syscall.Signal(1); i < 65; i++ {
		if i.String() == s || fmt.Sprint(int(i)) == s {
			if name := unix.SignalName(i); name != "" {
				return name
			}
		}
	}
	return s
}
