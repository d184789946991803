package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Sandbox      = (*Sandbox)(nil)
	_ runner.AgentSandbox = (*Sandbox)(nil)
	_ runner.Prestarter   = (*Sandbox)(nil)
)

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
	dir := r.host.State.Sandbox(spec.ID)
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

// Prestart implements runner.Prestarter.
func (s *Sandbox) Prestart(ctx context.Context, p runner.Process) error {
	return hostside.Prestart(ctx, s.id, s.isClosed(), s.Agent(), p, s.limits, s.spec.Isolation.Workspace)
}

// Exec implements runner.Sandbox: the agent runs the process.
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if err := hostside.CanExec(ctx, s.id, s.isClosed()); err != nil {
		return runner.Result{}, err
	}
	req, onOutput, err := hostside.ExecRequest(p, s.limits, s.spec.Isolation.Workspace)
	if err != nil {
		return runner.Result{}, err
	}

	l, err := s.life(ctx)
	if err != nil {
		return runner.Result{}, err
	}
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	w := l.cg.Watch(&req)
	ar, err := l.client.Exec(ctx, req, onOutput)
	w.End()
	s.endExec(l)
	if err != nil {
		if err, ok := hostside.ExecError(ctx, s.id, s.isClosed, err); ok {
			return runner.Result{}, err
		}
		if l.hasExited(2*time.Second) && l.cg.Sample().OOMKills > w.Before.OOMKills {
			// The OOM killer took the agent itself (under gVisor: the
			// whole sandbox): the process's fate is a result. A gVisor
			// sandbox restarts; otherwise later Execs fail.
			if s.r.gvisor {
				s.startRevive(l)
			}
			return hostside.OOMResult(w.After.Peak), nil
		}
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w%s", s.id, runner.ErrUnavailable, err, l.deathNote())
	}
	return hostside.ExecResult(ar, req, s.limits, w), nil
}

// killOnProtocolError kills the task when its agent broke the protocol: a
// sandbox that speaks garbage is not trusted with another request. The
// owner still calls Close.
func (s *Sandbox) killOnProtocolError(l *life) {
	<-l.client.Done()
	if !errors.Is(l.client.Err(), agent.ErrProtocol) || s.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostside.APITimeout)
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
		if n := l.cg.KillStrays(); n > 0 {
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
	smp := l.cg.Sample()
	return runner.Usage{CPU: smp.CPU, PeakMemory: smp.Peak}, nil
}

// Close implements runner.Sandbox: it closes the agent connection (the
// agent kills what it runs), kills and deletes the task, deletes the
// container with its snapshot, the network namespace and the state dir.
// Idempotent; later calls wait for the first and return nil. Cleanup runs
// even if ctx is cancelled, bounded by its own timeout.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.r.host.CloseSandbox(ctx, s.id, s.markClosed, func(ctx context.Context) error {
		s.mu.Lock()
		reviving := s.reviving
		s.mu.Unlock()
		if reviving != nil {
			// It sees closed when done and stops what it started.
			<-reviving
		}
		return s.destroy(ctx)
	})
}

// markClosed is hostside.Instance.CloseSandbox's mark.
func (s *Sandbox) markClosed() (chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.done, true
	}
	s.closed, s.done = true, make(chan struct{})
	return s.done, false
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
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
	defer cancel()
	if s.container != nil {
		if err := s.container.Delete(cctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, s.r.wrap("delete container", err))
		}
	}
	if err := removeNetns(s.netns); err != nil {
		errs = append(errs, err)
	}
	if s.r.tenants != nil && s.spec.Tenant != "" {
		s.r.tenants.ReleaseCPU(s.spec.Tenant, s.id)
	}
	if err := hostside.RestoreWorkspace(s.labels); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("containerd: remove state dir: %w", err))
	}
	return errors.Join(errs...)
}
