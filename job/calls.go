package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// The methods of api.JobService.

// Submit records and enqueues a call; see api.JobService.
func (s *Service) Submit(ctx context.Context, tenant string, req SubmitRequest) (*Job, bool, error) {
	decided := false // req.Decision is the job's once recorded on it
	j, created, err := s.submit(ctx, tenant, req, &decided)
	if req.Decision != nil && !decided {
		s.RefundDecision(req.Decision)
	}
	return j, created, err
}

func (s *Service) submit(ctx context.Context, tenant string, req SubmitRequest, decided *bool) (*Job, bool, error) {
	if tenant == "" {
		return nil, false, fmt.Errorf("%w: empty tenant", ErrInvalid)
	}
	var call tools.Call
	var tool *tools.Tool
	var args map[string]any
	var err error
	if p := req.prepared; p != nil {
		call, tool, args = p.call, p.tool, p.args
	} else if call, tool, args, err = s.reg.Prepare(req.Call); err != nil {
		return nil, false, err
	}
	if !tool.Runnable() {
		return nil, false, fmt.Errorf("%w: tool %q is a declaration only and cannot run", ErrInvalid, tool.Name)
	}
	reqLimits, err := s.withToolTimeout(req.Limits, tool, args)
	if err != nil {
		return nil, false, err
	}
	limits, err := s.cfg.effectiveLimits(toolDefaults(reqLimits, tool.Limits, s.cfg.Limits.Ceilings))
	if err != nil {
		return nil, false, err
	}
	if req.CallbackURL != "" {
		if err := s.checkCallbackURL(tenant, req.CallbackURL); err != nil {
			return nil, false, err
		}
	}
	tags, md, err := checkLabels(s.cfg.Labels, "the job", req.Tags, req.Metadata)
	if err != nil {
		return nil, false, err
	}
	key := req.IdempotencyKey
	if key != "" {
		want := idemRequest{tool: tool.Name, args: call.Arguments, session: req.SessionID, limits: limits}
		if j, err := s.replayKey(ctx, tenant, key, want); err == nil {
			return j, false, nil
		} else if errors.Is(err, ErrIdempotencyKeyReused) {
			return nil, false, err
		} else if !errors.Is(err, ErrNotFound) {
			return nil, false, fmt.Errorf("submit: %w", err)
		}
	}
	var ls *liveSession
	if req.SessionID != "" {
		if ls, err = s.activeSession(ctx, tenant, req.SessionID); err != nil {
			return nil, false, err
		}
		if eff, ok := ls.snapshot().allows(tool.Effects); !ok {
			return nil, false, fmt.Errorf("%w: tool %s needs the %q effect, which session %s does not allow (create the session with it in \"effects\")",
				ErrEffectNotAllowed, tool.Name, eff, req.SessionID)
		}
	}

	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrShutdown
	}
	runnerName := RunnerInProcess
	if tool.Run == nil {
		runnerName = s.cfg.RunnerName
	}
	now := time.Now().UTC()
	id := req.JobID
	if id == "" {
		id = ids.At("job_", now)
	}
	j := &Job{
		ID: id, Tenant: tenant, Tool: tool.Name, CallID: call.ID, Args: call.Arguments,
		IdempotencyKey: key, Runner: runnerName, Limits: limits, SessionID: req.SessionID,
		State: StateQueued, CreatedAt: now, Tags: tags, Metadata: md, Retry: req.Retry,
	}
	if req.CallbackURL != "" {
		j.Callback = &Callback{URL: req.CallbackURL, State: CallbackPending}
	}
	var d policy.Decision
	reserved := req.Decision != nil // by DecideBatch
	if reserved {
		j.Guard, d = s.record(j, *req.Decision, now), *req.Decision
	} else {
		j.Guard, d = s.decide(j, tool, now)
	}
	*decided = true
	ckey := s.cacheKey(tenant, req.SessionID, tool, args)
	// A hit spends nothing, so a spent budget does not refuse it; a deny
	// rule, a rate or usage limit and an approval still do (cache.go).
	if ckey != "" && (d.Outcome == policy.OutcomeAllow || (d.Outcome == policy.OutcomeDeny && d.Code == policy.CodeBudgetExhausted)) {
		if res, ok := s.cache.get(ckey, now); ok {
			if c := s.planCharge(d, reserved); c.Rate != nil { // a hit takes its rate limit token, as in memory
				req := policy.Request{Tenant: j.Tenant, Session: j.SessionID, Tool: tool.Name, Effects: tool.Effects}
				if r, ok := s.spendNow(ctx, req, d, Charge{Rate: c.Rate}); !ok {
					j.Guard = s.record(j, r, now)
					return s.submitRefused(ctx, j, r)
				}
			}
			s.m.cache.WithLabelValues(tool.Name, "hit").Inc()
			return s.submitCached(ctx, j, res)
		}
		if d.Outcome == policy.OutcomeAllow {
			s.m.cache.WithLabelValues(tool.Name, "miss").Inc()
		}
	}
	switch d.Outcome {
	case policy.OutcomeDeny:
		return s.submitRefused(ctx, j, d)
	case policy.OutcomeConfirm:
		return s.submitPending(ctx, j, tool, args, d, req)
	}
	if ls != nil && mutates(tool) {
		ls.bumpWorkspace()
	}
	if s.rep != nil && ls == nil {
		// Queued in the store for whichever replica has a free worker.
		mine, err := s.insertJob(ctx, j, s.planCharge(d, reserved), s.cfg.Queue.Size)
		if mine {
			s.startClaimed(j, tool, args, ckey)
			if err != nil && j.Guard != nil {
				// The insert's outcome is unknown: the job started keeps
				// its spend, nothing is refunded here.
				j.Guard.Spend = nil
			}
		}
		if err != nil {
			if r, ok := asRefused(err); ok {
				return s.refusedBySpend(ctx, j, tool, d, r)
			}
			s.refund(j)
			if errors.Is(err, ErrQueueFull) {
				s.m.queueRejected.Inc()
				return nil, false, err
			}
			if key != "" && errors.Is(err, ErrConflict) {
				return s.replayAfterConflict(ctx, j, err)
			}
			return nil, false, fmt.Errorf("submit: %w", err)
		}
		s.log.Debug("job queued", "job", j.ID, "tenant", tenant, "tool", j.Tool)
		return cloneJob(j), true, nil
	}
	select {
	case s.slots <- struct{}{}:
	default:
		// A call the guard would refuse is refused by it, not by the full
		// queue, as with the in-memory guard, which decides first.
		if c := s.planCharge(d, reserved); !c.empty() {
			if r, ok := asRefused(s.atomic.CheckSpend(ctx, c)); ok {
				return s.refusedBySpend(ctx, j, tool, d, r)
			}
		}
		s.refund(j)
		s.m.queueRejected.Inc()
		return nil, false, ErrQueueFull
	}
	e := s.newEntry(j, tool, args)
	if ckey != "" {
		e.cacheKey, e.cacheTTL = ckey, tool.Cache.TTL
	}
	e.mu.Lock() // a Cancel of this ID waits until the record exists
	s.register(e)
	if _, err := s.insertJob(ctx, j, s.planCharge(d, reserved), 0); err != nil {
		e.mu.Unlock()
		s.unregister(j.ID)
		<-s.slots
		if r, ok := asRefused(err); ok {
			return s.refusedBySpend(ctx, j, tool, d, r)
		}
		s.refund(j)
		if key != "" && errors.Is(err, ErrConflict) { // lost the race for the key
			return s.replayAfterConflict(ctx, j, err)
		}
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	snap := cloneJob(j)
	if ls != nil {
		ls.join(j.ID)
	}
	e.events.emit(Event{Type: EventQueued, Time: now, Job: cloneJob(j)})
	e.mu.Unlock()
	s.m.queueDepth.Inc()
	s.sched.push(e)
	s.log.Debug("job queued", "job", j.ID, "tenant", tenant, "tool", j.Tool)
	return snap, true, nil
}

// Get returns a tenant's job; another tenant's job is ErrNotFound. The
// reads (Get, List, Wait, Subscribe, Artifact, GetSession, ListSessions)
// take AllTenants for the operator, who sees every tenant's.
func (s *Service) Get(ctx context.Context, tenant, id string) (*Job, error) {
	// A job this process tracks is answered from memory: its record may
	// lag (a session's short call is written once, when it finishes).
	if e := s.entry(id); e != nil && visible(tenant, e.tenant()) {
		return e.snapshot(), nil
	}
	j, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !visible(tenant, j.Tenant) {
		return nil, fmt.Errorf("get job %s: %w", id, ErrNotFound)
	}
	return j, nil
}

// List returns a tenant's jobs newest first; see Store.List.
func (s *Service) List(ctx context.Context, tenant string, f ListFilter) ([]*Job, string, error) {
	switch f.State {
	case "", StateQueued, StateRunning, StateSucceeded, StateFailed, StateCancelled, StatePendingApproval:
	default:
		return nil, "", fmt.Errorf("%w: unknown state %q", ErrInvalid, f.State)
	}
	if err := checkFilter(s.cfg.Labels, f.LabelFilter); err != nil {
		return nil, "", err
	}
	return s.st.List(ctx, tenant, f)
}

// Cancel stops a queued job at once (cancelled; the worker skips it) or
// cancels a running job's context (the runner kills the process tree) and
// waits, up to ctx or 10s, for it to be recorded as cancelled. A terminal
// job is returned unchanged.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (*Job, error) {
	if tenant == AllTenants {
		return nil, fmt.Errorf("%w: cancel needs the job's tenant", ErrInvalid)
	}
	e := s.entry(id)
	if e == nil {
		j, err := s.Get(ctx, tenant, id)
		if err != nil || j.State != StateQueued {
			return j, err
		}
		// Queued but not in this process's queue (after Shutdown).
		s.refund(j)
		markCancelled(j)
		if err := s.st.Update(ctx, j); err != nil {
			return nil, fmt.Errorf("cancel job %s: %w", id, err)
		}
		s.m.jobs.WithLabelValues(j.Tenant, j.Tool, j.Runner, OutcomeCancelled).Inc()
		return j, nil
	}
	e.mu.Lock()
	if e.job.Tenant != tenant {
		e.mu.Unlock()
		return nil, fmt.Errorf("cancel job %s: %w", id, ErrNotFound)
	}
	switch e.job.State {
	case StatePendingApproval:
		e.mu.Unlock()
		s.cancelPending(ctx, e)
		return e.snapshot(), nil
	case StateQueued:
		j := cloneJob(e.job)
		s.refund(j)
		markCancelled(j)
		if err := s.st.Update(ctx, j); err != nil {
			e.mu.Unlock()
			return nil, fmt.Errorf("cancel job %s: %w", id, err)
		}
		e.job = j
		snap := cloneJob(j)
		e.mu.Unlock()
		s.finished(e, snap)
		return cloneJob(snap), nil
	case StateRunning:
		if e.cancelReason == "" {
			e.cancelReason = ReasonCancelled
			e.cancel()
		}
		e.mu.Unlock()
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-e.done:
		case <-ctx.Done():
		case <-t.C:
		}
		return e.snapshot(), nil
	default:
		snap := cloneJob(e.job)
		e.mu.Unlock()
		return snap, nil
	}
}

// visible reports whether a caller of tenant (AllTenants: the operator)
// may read what owner owns.
func visible(tenant, owner string) bool { return tenant == owner || tenant == AllTenants }

func markCancelled(j *Job) {
	now := time.Now().UTC()
	j.State, j.Reason, j.FinishedAt = StateCancelled, ReasonCancelled, &now
	j.Result = &tools.Result{OK: false, Error: "cancelled before it started"}
}

// Wait blocks until the job is terminal or ctx ends (then it returns the
// current snapshot and ctx.Err()).
func (s *Service) Wait(ctx context.Context, tenant, id string) (*Job, error) {
	// A job this process still tracks is answered from memory: its done
	// channel closes only after the terminal record is in the store.
	if e := s.entry(id); e != nil && visible(tenant, e.tenant()) {
		select {
		case <-e.done:
			return e.snapshot(), nil
		case <-ctx.Done():
			return e.snapshot(), ctx.Err()
		}
	}
	if s.rep != nil {
		return s.waitShared(ctx, tenant, id)
	}
	j, err := s.Get(ctx, tenant, id)
	if err != nil || j.State.Terminal() {
		return j, err
	}
	e := s.entry(id)
	if e == nil {
		// Finished and retired since the Get, or queued in the store but
		// not in this process's queue (after Shutdown).
		if j, err = s.Get(ctx, tenant, id); err != nil || j.State.Terminal() {
			return j, err
		}
		<-ctx.Done()
		return j, ctx.Err()
	}
	select {
	case <-e.done:
		return e.snapshot(), nil
	case <-ctx.Done():
		return e.snapshot(), ctx.Err()
	}
}

// Registry returns the tool registry calls are resolved against.
func (s *Service) Registry() *tools.Registry { return s.reg }

// QueueRetryAfter estimates in seconds (1..600) when a full queue will have
// room: queued jobs per worker times the recent average job duration.
func (s *Service) QueueRetryAfter() int {
	avg := time.Duration(s.avgNanos.Load())
	if avg <= 0 {
		avg = time.Second
	}
	est := float64(len(s.slots)+1) / float64(s.cfg.Queue.Workers) * avg.Seconds()
	return int(min(max(math.Ceil(est), 1), 600))
}

// withToolTimeout adds the time limit a sandboxed tool's own arguments ask
// for (timeout_seconds: tools.Command.Timeout) to the request's limits: it
// is a request for limits.timeout like any other, held to the same
// ceiling, the smaller one winning when both are given.
func (s *Service) withToolTimeout(l runner.Limits, tool *tools.Tool, args map[string]any) (runner.Limits, error) {
	if tool.Command == nil {
		return l, nil
	}
	cmd, err := tool.Command(args)
	if err != nil || cmd.Timeout <= 0 { // a refused call fails when it runs, with the tool's reason
		return l, nil
	}
	if ceil := s.cfg.Limits.Ceilings.Timeout; ceil > 0 && cmd.Timeout > ceil {
		return l, fmt.Errorf("%w: timeout_seconds %g exceeds the ceiling %g (limits.ceilings.timeout %s)",
			ErrInvalid, cmd.Timeout.Seconds(), ceil.Seconds(), ceil)
	}
	if l.Timeout == 0 || cmd.Timeout < l.Timeout {
		l.Timeout = cmd.Timeout
	}
	return l, nil
}
