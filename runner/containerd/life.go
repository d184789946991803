package containerd

import (
	"github.com/sandboxd/sandboxd/runner/internal/hostside"

	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent"
)

// life is one run of a sandbox's container: its task (the agent as pid 1)
// and the connection to that agent. A sandbox has one, except under gVisor,
// where an OOM kill ends the whole task and the sandbox gets a new life
// (see Sandbox.revive).
type life struct {
	task     client.Task
	stopWait context.CancelFunc
	exited   chan struct{} // closed when the task's init exited
	// exitStatus is valid once exited is closed.
	exitStatus client.ExitStatus
	cg         *hostside.Cgroup // nil when the task's cgroup is not readable here
	client     *agent.Client
	log        *agentLog
}

// logTail returns the task's state and the end of the agent's stdout and
// stderr, for error messages.
func (l *life) logTail() string {
	state := ""
	if l.exited != nil {
		select {
		case <-l.exited:
			state = fmt.Sprintf("task exited with %d; ", l.exitStatus.ExitCode())
		default:
		}
	}
	return state + "agent log:\n" + l.log.tail(500*time.Millisecond)
}

// start creates and starts a task of the sandbox's container and connects
// to its agent. On failure it leaves no task behind.
func (s *Sandbox) start(ctx context.Context) (_ *life, err error) {
	r := s.r
	cctx, cancel := context.WithTimeout(ctx, hostside.CreateTimeout)
	defer cancel()
	log, err := newAgentLog(s.logPath)
	if err != nil {
		return nil, err
	}
	task, err := s.container.NewTask(cctx, cio.LogFile(s.logPath))
	if err != nil {
		log.close()
		return nil, hostside.CtxOr(ctx, r.wrap("create task", err))
	}
	log.opened()
	l := &life{task: task, log: log}
	defer func() {
		if err != nil {
			if serr := l.stop(ctx); serr != nil {
				r.cfg.Logger.Warn("containerd runner: remove task after failed start", "sandbox", s.id, "err", serr)
			}
		}
	}()
	wctx, stopWait := context.WithCancel(context.Background())
	ch, err := task.Wait(wctx)
	if err != nil {
		stopWait()
		return nil, hostside.CtxOr(ctx, r.wrap("wait task", err))
	}
	l.stopWait, l.exited = stopWait, make(chan struct{})
	go func() {
		st := <-ch
		l.exitStatus = st
		close(l.exited)
	}()
	if err := task.Start(cctx); err != nil {
		return nil, hostside.CtxOr(ctx, fmt.Errorf("%w\n%s", r.wrap("start task", err), l.logTail()))
	}
	l.cg = hostside.FindCgroup(int(task.Pid()))
	if l.cg != nil && r.gvisor {
		l.cg.NoStrays = true
	}
	cl, err := s.dialAgent(ctx, l)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("agent did not answer: %w\n%s", err, l.logTail())
	}
	l.client = cl
	return l, nil
}

// hasExited reports whether the task exited, waiting up to d for it.
func (l *life) hasExited(d time.Duration) bool {
	if l.exited == nil {
		return false
	}
	select {
	case <-l.exited:
		return l.exitStatus.Error() == nil
	case <-time.After(d):
		return false
	}
}

// deathNote explains a lost agent connection from the task's state.
func (l *life) deathNote() string {
	if l.hasExited(time.Second) {
		tail := l.log.tail(200 * time.Millisecond)
		if len(tail) > 512 {
			tail = "..." + tail[len(tail)-512:]
		}
		return fmt.Sprintf(" (task exited with %d at %s; agent log: %q)", l.exitStatus.ExitCode(), l.exitStatus.ExitTime().Format(time.RFC3339Nano), tail)
	}
	return " (task still running)"
}

// stop closes the agent connection, kills the task, waits for its exit
// and deletes it. Cleanup runs even if ctx is cancelled, bounded by its
// own timeout.
func (l *life) stop(ctx context.Context) error {
	if l.client != nil {
		l.client.Close()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
	defer cancel()
	// A task that already exited refuses a kill (runsc: "sandbox is not
	// running"): only a failed kill of a live task is an error.
	var errs []error
	kerr := l.task.Kill(cctx, unix.SIGKILL, client.WithKillAll)
	if l.exited != nil {
		select {
		case <-l.exited:
			kerr = nil
		case <-cctx.Done():
		}
	}
	if kerr != nil && !errdefs.IsNotFound(kerr) {
		errs = append(errs, fmt.Errorf("containerd: kill task: %w", kerr))
	}
	if _, err := l.task.Delete(cctx); err != nil && !errdefs.IsNotFound(err) {
		if _, err := l.task.Delete(cctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("containerd: delete task: %w", err))
		}
	}
	if l.stopWait != nil {
		l.stopWait()
	}
	if err := l.log.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
