package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

const (
	// closeTimeout bounds Sandbox.Close, run on a context detached from
	// the job's so a cancelled job still reaps its sandbox.
	closeTimeout = 30 * time.Second
	// storeTimeout bounds recording a transition, also detached.
	storeTimeout = 10 * time.Second
	// lazyRunningAfter is how long a session's call runs before its
	// running state is written (run): a shorter call is never written
	// running.
	lazyRunningAfter = 50 * time.Millisecond
	// execGrace is how long past its own timeout an Exec may take before
	// the service cancels it (a runner that ignores its timeout).
	execGrace = 30 * time.Second
)

// worker runs the jobs the scheduler gives it until Shutdown closes the
// scheduler (jobs still queued stay queued in the store for the next
// start).
func (s *Service) worker() {
	for {
		e := s.sched.next()
		if e == nil {
			return
		}
		<-s.slots
		s.m.queueDepth.Dec()
		s.run(e)
		s.sched.done(e.tenant(), e.forkLooped())
		if e.claimed {
			s.rep.busy.Add(-1)
			s.rep.poke()
		}
	}
}

// attempt is what executing a tool produced, before classification.
type attempt struct {
	res      tools.Result
	ran      bool  // the tool ran: its effects were spent
	timedOut bool  // it ran past its time limit
	err      error // infrastructure failure: no usable tool result
}

func (s *Service) run(e *entry) {
	e.mu.Lock()
	if e.job.State != StateQueued {
		e.mu.Unlock() // cancelled while queued
		return
	}
	select {
	case <-s.quit:
		e.mu.Unlock()
		return
	default:
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	defer cancel()
	e.cancel = cancel
	j := e.job
	now := time.Now().UTC()
	j.State, j.StartedAt = StateRunning, &now
	j.Attempts++
	var lazy *time.Timer
	switch {
	case s.rep == nil && j.SessionID != "":
		// A session's call is recorded running only if it still runs
		// lazyRunningAfter from now: most finish sooner, and their
		// finished record is then their only write after the insert. A
		// crash meanwhile cannot run it twice: the session's sandbox
		// dies with the process, and a session's job found queued at
		// the next start ends lost (Start).
		lazy = time.AfterFunc(lazyRunningAfter, func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if j.State == StateRunning {
				s.storeUpdate(j)
			}
		})
	case s.rep != nil:
		// On a replica the job runs only once its running record, fenced
		// by the lease, is in: never twice across replicas.
		if err := s.storeRunning(j); err != nil {
			j.State, j.StartedAt = StateQueued, nil
			j.Attempts--
			e.mu.Unlock()
			s.unregister(j.ID)
			s.log.Warn("claimed job not started", "job", j.ID, "err", err)
			return
		}
	default:
		s.storeUpdate(j)
	}
	started := cloneJob(j)
	e.events.emit(Event{Type: EventStarted, Time: now, Job: started})
	e.mu.Unlock()

	s.m.inFlight.Inc()
	log := s.log.With("job", j.ID, "tenant", j.Tenant, "tool", j.Tool)
	log.Debug("job started")

	bump := func() {}
	if j.SessionID != "" && mutates(e.tool) {
		if ls := s.liveSession(j.SessionID); ls != nil {
			bump = ls.bumpWorkspace // the result cache's workspace version
		}
	}
	bump()
	var a attempt
	if refused := s.runBefore(ctx, e, j); refused != nil {
		a.res = *refused
		e.mu.Lock()
		s.refund(j) // the call never ran
		e.mu.Unlock()
	} else {
		a = s.executeWithRetries(ctx, e, j, started, log)
		if a.err == nil && ctx.Err() == nil {
			s.runAfter(ctx, e, j, &a.res)
		}
	}
	bump()
	// Not running any more: lowered before waiters wake, so a client that
	// saw the job finish never sees it still in flight.
	s.m.inFlight.Dec()

	if lazy != nil {
		lazy.Stop() // a write it started holds e.mu: it lands first
	}
	e.mu.Lock()
	state, reason := classify(e.cancelReason, &a)
	if a.ran && e.tool != nil {
		a.res.Effects = slices.Clone(e.tool.Effects)
	} else {
		a.res.Effects = nil
	}
	fin := time.Now().UTC()
	boundResult(&a.res, j.Limits.OutputBytes)
	s.keepArtifacts(j, &a.res)
	j.State, j.Reason, j.FinishedAt, j.Result = state, reason, &fin, &a.res
	e.cancel = nil
	snap := cloneJob(j)
	if !s.recordFinished(e, j, snap) {
		s.storeUpdate(j)
	}
	e.mu.Unlock()
	if a.err != nil {
		log.Warn("job failed", "reason", reason, "err", a.err)
	} else {
		log.Debug("job finished", "state", state, "reason", reason)
	}
	s.finished(e, snap)
}

// classify turns an attempt into the terminal state and reason (see the
// terminal states on Service) and makes sure a failed Result says why.
func classify(cancelReason string, a *attempt) (State, string) {
	fail := func(reason, msg string) (State, string) {
		a.res.OK = false
		if a.res.Error == "" {
			a.res.Error = msg
		}
		if reason == ReasonCancelled {
			return StateCancelled, reason
		}
		return StateFailed, reason
	}
	switch {
	case cancelReason == ReasonCancelled:
		return fail(ReasonCancelled, "cancelled")
	case cancelReason == ReasonShutdown:
		return fail(ReasonShutdown, "sandboxd shut down while the job was running")
	case a.err != nil:
		a.res.OK = false
		reason := infraReason(a.err)
		if reason == ReasonInternal {
			a.res.Error = "internal error: " + a.err.Error()
		} else { // the cause is in the message: the runner's daemon, the disk
			a.res.Error = infraCause(a.err).Error()
		}
		return StateFailed, reason
	case a.timedOut:
		return fail(ReasonTimeout, "timed out")
	case a.res.OK:
		return StateSucceeded, ""
	default:
		return fail(ReasonToolError, "the tool failed without saying why")
	}
}

// execute runs the job's tool; a panic becomes an infrastructure failure.
func (s *Service) execute(ctx context.Context, e *entry, j *Job) (a attempt) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("tool panicked", "job", j.ID, "tool", j.Tool, "panic", p, "stack", string(debug.Stack()))
			a.err = fmt.Errorf("tool %s panicked: %v", j.Tool, p)
		}
	}()
	if e.tool == nil { // recovered from the store: resolve again
		_, tool, args, err := s.reg.Prepare(tools.Call{ID: j.CallID, Name: j.Tool, Arguments: j.Args})
		if err != nil {
			return attempt{err: fmt.Errorf("prepare recovered job: %w", err)}
		}
		e.mu.Lock()
		e.tool, e.args = tool, args
		e.mu.Unlock()
	}
	var ls *liveSession
	if j.SessionID != "" {
		var a attempt
		var ok bool
		if ls, a, ok = s.enterSession(ctx, j); !ok {
			return a
		}
		defer s.touch(ls)
	}
	switch {
	case e.tool.Run != nil:
		return s.runInProcess(ctx, e.tool, e.args, j, ls)
	case e.tool.Command != nil:
		defer s.cpu.enter(j.Tenant)()
		return s.runSandboxed(ctx, e, j, ls)
	default:
		return attempt{err: fmt.Errorf("tool %s cannot run", j.Tool)}
	}
}

func (s *Service) runInProcess(ctx context.Context, tool *tools.Tool, args map[string]any, j *Job, ls *liveSession) attempt {
	env := tools.Env{HTTP: s.httpOptions(j.Tenant), ReadOnly: !tool.HasEffect(tools.EffectFileWrite)}
	switch {
	case ls != nil:
		if tool.HasEffect(tools.EffectFileRead) || tool.HasEffect(tools.EffectFileWrite) {
			env.Workspace = ls.dir // the session's: files persist between its jobs
		}
	case tool.HasEffect(tools.EffectFileRead) || tool.HasEffect(tools.EffectFileWrite):
		ws, cleanup, err := s.workspace(j.ID)
		if err != nil {
			return attempt{err: err}
		}
		defer cleanup()
		env.Workspace = ws
	}
	tctx := ctx
	if j.Limits.Timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, j.Limits.Timeout)
		defer cancel()
	}
	start := time.Now()
	res, err := tool.Run(tctx, env, args)
	wall := time.Since(start)
	if errors.Is(err, tools.ErrInfrastructure) { // the provider behind the tool failed
		return attempt{ran: !errors.Is(err, tools.ErrNotStarted), err: err}
	}
	a := attempt{res: res, ran: true}
	if a.res.Usage.WallMS == 0 {
		a.res.Usage.WallMS = wall.Milliseconds()
	}
	timedOut := ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded)
	switch {
	case timedOut && (err != nil || !res.OK):
		a.timedOut = true
		a.res.OK = false
		a.res.Error = fmt.Sprintf("timed out after %s", j.Limits.Timeout)
	case err != nil:
		a.res.OK = false
		if a.res.Error == "" {
			a.res.Error = err.Error()
		}
	}
	return a
}

func (s *Service) runSandboxed(ctx context.Context, e *entry, j *Job, ls *liveSession) attempt {
	tool := e.tool
	if s.r == nil {
		return attempt{err: errors.New("no runner configured for sandboxed tools")}
	}
	cmd, err := tool.Command(e.args)
	if err != nil { // the tool refused its arguments: nothing ran
		return attempt{res: tools.Result{OK: false, Error: err.Error()}}
	}
	var sb runner.Sandbox
	if ls != nil {
		sb = ls.sb // the session's: it outlives the job
	} else {
		spec, err := s.specFor(j.ID, j.Tenant, "", tool.Effects, func(r EgressRecord) { s.recordEgress(e, r) })
		if err != nil {
			return attempt{err: err}
		}
		spec.Limits, spec.Image = j.Limits, tool.Image
		spec.Labels = map[string]string{"job": j.ID, "tenant": j.Tenant}
		s.tenantSpec(&spec, j.Tenant)
		var release func()
		sb, release, err = s.oneShotSandbox(ctx, spec)
		if err != nil {
			return attempt{err: fmt.Errorf("create sandbox: %w", err)}
		}
		// The job's result does not wait for the sandbox to be destroyed.
		defer s.releases.Go(release)
	}

	timeout := j.Limits.Timeout
	if cmd.Timeout > 0 && (timeout == 0 || cmd.Timeout < timeout) {
		timeout = cmd.Timeout
	}
	if ls != nil && tool.Name == "python_repl" {
		if repl, ok := replOf(sb); ok {
			return s.runREPL(ctx, e, j, repl, timeout, cmd.Decode)
		}
	}
	// The deadline runs from the job's start (its started event), not
	// from the exec: the time a sandbox took to make (a drained pool under
	// load) counts against it, so the kill is sent at started + timeout
	// whatever the load.
	ectx, limit := ctx, timeout
	if timeout > 0 {
		timeout = untilDeadline(j, timeout)
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, timeout+execGrace)
		defer cancel()
	}
	// The sandbox's network is egress when the tool or the session has
	// the http effect: point HTTP clients at its proxy.
	http := tool.HasEffect(tools.EffectHTTP) || (ls != nil && slices.Contains(ls.snapshot().Effects, tools.EffectHTTP))
	p := commandProcess(cmd, http, timeout, newEventWriter(e.events, EventStdout), newEventWriter(e.events, EventStderr))
	start := time.Now()
	pr, err := sb.Exec(ectx, p)
	wall := time.Since(start)
	if err != nil {
		return attempt{ran: true, err: fmt.Errorf("exec in sandbox: %w", err)}
	}
	if pr.TimedOut {
		killed := pr.KilledAt
		if killed.IsZero() {
			killed = time.Now()
		}
		e.events.emit(Event{Type: EventKilled, Time: killed.UTC()})
	}
	res := tools.FromProcess(processInfo(pr, j.Limits), tool.Effects, wall)
	if pr.TimedOut && limit > 0 && strings.HasPrefix(res.Error, "timed out after ") {
		res.Error = "timed out after " + limit.String() // from the job's start, not the exec's
	}
	if cmd.Decode != nil && !pr.TimedOut {
		res = cmd.Decode(res)
	}
	res.Usage.CPUMS = pr.Usage.CPU.Milliseconds()
	res.Usage.PeakMemory = pr.Usage.PeakMemory
	return attempt{res: res, ran: true, timedOut: pr.TimedOut}
}

// commandProcess is the process of a sandboxed tool's command: what a job
// runs, and what the pool prestarts (prestartProcess) so that the two
// match (runner.Prestarter).
func commandProcess(cmd tools.Command, http bool, timeout time.Duration, stdout, stderr io.Writer) runner.Process {
	env := cmd.Env
	if http {
		env = append(slices.Clip(env), proxyEnv...)
	}
	p := runner.Process{Args: cmd.Args, Env: env, Dir: cmd.Dir, Timeout: timeout, Stdout: stdout, Stderr: stderr}
	if len(cmd.Stdin) > 0 {
		p.Stdin = bytes.NewReader(cmd.Stdin)
	}
	return p
}

// untilDeadline is what is left of a job's timeout at this moment,
// counted from its start (at least a millisecond: the kill goes at once).
func untilDeadline(j *Job, timeout time.Duration) time.Duration {
	if j.StartedAt == nil {
		return timeout
	}
	return max(time.Until(j.StartedAt.Add(timeout)), time.Millisecond)
}

// workspace creates WorkDir/<id>, a plain directory, for a one-shot
// in-process tool (read_file, write_file ...): no code runs there and what
// such a tool writes is bounded by its request, so it gets no filesystem
// of its own (sandboxes do: newWorkspace). cleanup removes it.
func (s *Service) workspace(id string) (string, func(), error) {
	dir := filepath.Join(s.cfg.WorkDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create workspace: %w", err)
	}
	return dir, func() { s.removeWorkspace(dir) }, nil
}

// recordFinished records j's terminal state together with its last events
// (the finished event among them) in one write, when the store can
// (FinishWriter) and hub.record finds them all still to write; snap is
// the finished event's copy of j. Not on a replica: its writes are fenced
// by the lease (storeUpdate's retries). False: nothing was written.
func (s *Service) recordFinished(e *entry, j, snap *Job) bool {
	fw, ok := s.st.(FinishWriter)
	if !ok || s.rep != nil {
		return false
	}
	return e.events.record(Event{Type: EventFinished, Time: *snap.FinishedAt, Job: snap}, func(recs []EventRecord) error {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		err := fw.UpdateWithEvents(ctx, j, recs)
		if err != nil {
			s.log.Warn("record finished job with its events", "job", j.ID, "err", err)
		}
		return err
	})
}

// storeUpdate records a transition on a detached context; a failure is
// logged and the in-memory state stays authoritative for this process.
// On a replica a terminal transition is retried while the store is
// unavailable (until the lease is lost): the record is what other
// replicas and clients see.
func (s *Service) storeUpdate(j *Job) {
	for d := 100 * time.Millisecond; ; d = min(2*d, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := s.st.Update(ctx, j)
		cancel()
		if err == nil {
			return
		}
		if s.rep == nil || !j.State.Terminal() || !errors.Is(err, ErrStoreUnavailable) || s.rep.lost.Load() {
			s.log.Error("record job state", "job", j.ID, "state", j.State, "err", err)
			return
		}
		time.Sleep(d)
	}
}

// storeRunning records a claimed job running on a replica, retrying
// while the store is unavailable; a fenced write (the job is not this
// lease's any more) or a lost lease is an error: the job must not run.
func (s *Service) storeRunning(j *Job) error {
	for d := 100 * time.Millisecond; ; d = min(2*d, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := s.st.Update(ctx, j)
		cancel()
		if err == nil || !errors.Is(err, ErrStoreUnavailable) || s.rep.lost.Load() {
			return err
		}
		select {
		case <-s.quit:
			return err
		case <-time.After(d):
		}
	}
}
