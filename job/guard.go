package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// The guard in the job service: Submit asks the guard (Config.Guard) before
// a job is queued. allow queues it with the units the decision reserved
// recorded on the job; deny (a rule, a spent budget, a usage or rate limit)
// records the job as failed with the guard's reason as a tool result the
// model can read; confirm records it as pending_approval with an Approval
// that a human decides (DecideApproval) or that expires. Units reserved by
// a job that never runs go back (Refund).

// guardEnabled reports whether tenant's calls go through the guard.
func (s *Service) guardEnabled(tenant string) bool {
	return s.cfg.Guard != nil && s.cfg.Guard.Enabled(tenant)
}

// decide asks the guard about a call and returns the record to keep on the
// job (nil when the tenant has no policy).
func (s *Service) decide(j *Job, tool *tools.Tool, now time.Time) (*GuardRecord, policy.Decision) {
	if !s.guardEnabled(j.Tenant) {
		return nil, policy.Decision{Outcome: policy.OutcomeAllow}
	}
	req := policy.Request{Tenant: j.Tenant, Session: j.SessionID, Tool: tool.Name, Effects: tool.Effects}
	if s.atomic != nil { // the store spends at the insert (guard_shared.go)
		d := s.cfg.Guard.Plan(req)
		g := s.record(j, d, now)
		if g != nil {
			g.Spend = nil // set once spent (insertJob)
		}
		return g, d
	}
	d := s.cfg.Guard.Decide(req)
	return s.record(j, d, now), d
}

// record is the GuardRecord of decision d on j (nil when the tenant has
// no policy).
func (s *Service) record(j *Job, d policy.Decision, now time.Time) *GuardRecord {
	if !s.guardEnabled(j.Tenant) {
		return nil
	}
	g := &GuardRecord{
		Outcome: d.Outcome, Code: d.Code, Rule: d.Rule, Reason: d.Reason,
		Remaining: d.Remaining, Spend: d.Spend, DecidedAt: now,
	}
	if d.RetryAfter > 0 {
		at := now.Add(d.RetryAfter)
		g.RetryAt = &at
	}
	return g
}

// refund gives back what the job's decision reserved (the job never ran).
// The caller holds the job exclusively and records it afterwards.
func (s *Service) refund(j *Job) {
	if j.Guard == nil || j.Guard.Refunded || len(j.Guard.Spend) == 0 {
		return
	}
	switch {
	case s.atomic != nil:
		s.refundShared(j.Guard.Spend)
	case s.cfg.Guard != nil:
		s.cfg.Guard.Refund(j.Guard.Spend)
	}
	j.Guard.Refunded = true
}

// guardReason maps a deny decision's code to the job's failure reason.
func guardReason(code string) string {
	switch code {
	case ReasonBudgetExhausted, ReasonUsageLimit, ReasonRateLimited:
		return code
	default:
		return ReasonDenied
	}
}

// submitRefused records a call the guard denied: a failed job whose Result
// says why, so the model reads the refusal as the tool's answer.
func (s *Service) submitRefused(ctx context.Context, j *Job, d policy.Decision) (*Job, bool, error) {
	now := j.CreatedAt
	j.State, j.Reason, j.FinishedAt = StateFailed, guardReason(d.Code), &now
	msg := d.Reason
	if msg == "" {
		msg = "the call was refused by the tenant's policy"
	}
	// The guard's reason already says when a retry may pass.
	j.Result = &tools.Result{OK: false, Error: "refused by policy: " + msg}
	e := s.newEntry(j, nil, nil)
	if err := s.st.Create(ctx, j); err != nil {
		if j.IdempotencyKey != "" && errors.Is(err, ErrConflict) {
			return s.replayAfterConflict(ctx, j, err)
		}
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	s.register(e)
	snap := cloneJob(j)
	e.events.emit(Event{Type: EventQueued, Time: now, Job: cloneJob(j)})
	s.finished(e, snap)
	s.log.Info("call refused by policy", "job", j.ID, "tenant", j.Tenant, "tool", j.Tool, "rule", d.Rule, "code", d.Code)
	return cloneJob(snap), true, nil
}

// submitPending records a call that needs a human's approval.
func (s *Service) submitPending(ctx context.Context, j *Job, tool *tools.Tool, args map[string]any, d policy.Decision, req SubmitRequest) (*Job, bool, error) {
	j.State = StatePendingApproval
	a := &Approval{
		ID: ids.At("apr_", j.CreatedAt), Tenant: j.Tenant, JobID: j.ID, SessionID: j.SessionID,
		Tool: j.Tool, Arguments: j.Args, Effects: slices.Clone(tool.Effects),
		Rule: d.Rule, Reason: d.Reason, State: ApprovalPending,
		CreatedAt: j.CreatedAt, ExpiresAt: j.CreatedAt.Add(s.approvalTimeout(j.Tenant)),
	}
	if j.Guard != nil {
		j.Guard.ApprovalID = a.ID
	}
	e := s.newEntry(j, tool, args)
	e.retry, e.hold, e.decided = req.Retry, req.Hold, make(chan struct{})
	e.mu.Lock()
	s.register(e)
	fail := func(err error) (*Job, bool, error) {
		e.mu.Unlock()
		s.unregister(j.ID)
		s.refund(j)
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	if _, err := s.insertJob(ctx, j, s.planCharge(d, req.Decision != nil), 0); err != nil {
		if r, ok := asRefused(err); ok { // nothing was spent or written
			e.mu.Unlock()
			s.unregister(j.ID)
			return s.refusedBySpend(ctx, j, tool, d, r)
		}
		if j.IdempotencyKey != "" && errors.Is(err, ErrConflict) {
			e.mu.Unlock()
			s.unregister(j.ID)
			s.refund(j)
			return s.replayAfterConflict(ctx, j, err)
		}
		return fail(err)
	}
	if err := s.st.CreateApproval(ctx, a); err != nil {
		// The job exists without its approval: end it so nothing waits.
		now := time.Now().UTC()
		s.refund(j)
		j.State, j.Reason, j.FinishedAt = StateFailed, ReasonInternal, &now
		j.Result = &tools.Result{OK: false, Error: "internal error: could not record the approval request"}
		s.storeUpdate(j)
		snap := cloneJob(j)
		e.mu.Unlock()
		s.finished(e, snap)
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	snap := cloneJob(j)
	e.events.emit(Event{Type: EventPendingApproval, Time: j.CreatedAt, Job: cloneJob(j)})
	e.mu.Unlock()
	s.approvals.add(a)
	s.notifyApproval(a)
	s.log.Info("call waits for approval", "job", j.ID, "approval", a.ID, "tenant", j.Tenant, "tool", j.Tool, "rule", d.Rule)
	return snap, true, nil
}

func (s *Service) approvalTimeout(tenant string) time.Duration {
	return s.cfg.Policies[tenant].Approvals.TimeoutOrDefault()
}

// AllTenants, as the tenant of GetApproval, ListApprovals and
// DecideApproval, is every tenant: the operator's view. No tenant can be
// named so (the configuration refuses '*' in tenant names).
const AllTenants = "*"

// GetApproval returns a tenant's approval; another tenant's is ErrNotFound.
func (s *Service) GetApproval(ctx context.Context, tenant, id string) (*Approval, error) {
	a, err := s.st.GetApproval(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.Tenant != tenant && tenant != AllTenants {
		return nil, fmt.Errorf("get approval %s: %w", id, ErrNotFound)
	}
	return a, nil
}

// ListApprovals returns a tenant's approvals, newest first.
func (s *Service) ListApprovals(ctx context.Context, tenant string, f ApprovalFilter) ([]*Approval, string, error) {
	switch f.State {
	case "", ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired:
	default:
		return nil, "", fmt.Errorf("%w: unknown approval state %q (pending, approved, denied, expired)", ErrInvalid, f.State)
	}
	return s.st.ListApprovals(ctx, tenant, f)
}

// DecideApproval approves or denies a pending approval. An approved job is
// queued (ErrQueueFull leaves the approval pending: retry later); a denied
// one fails with ReasonApprovalDenied and the reviewer's reason. An approval
// already decided or expired is ErrConflict.
func (s *Service) DecideApproval(ctx context.Context, tenant, id string, d ApprovalDecision) (*Approval, error) {
	a, err := s.GetApproval(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if a.State != ApprovalPending {
		return a, fmt.Errorf("%w: approval %s is already %s", ErrConflict, id, a.State)
	}
	now := time.Now().UTC()
	if !now.Before(a.ExpiresAt) {
		s.expireApproval(a)
		return nil, fmt.Errorf("%w: approval %s expired at %s", ErrConflict, id, a.ExpiresAt.Format(time.RFC3339))
	}
	e := s.entry(a.JobID)
	if e == nil {
		return nil, fmt.Errorf("decide approval %s: job %s is not pending in this process", id, a.JobID)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrShutdown
	}
	held := e.held()
	if d.Approve && !held { // a held job takes its queue slot at Release
		select {
		case s.slots <- struct{}{}:
		default:
			s.m.queueRejected.Inc()
			return nil, ErrQueueFull
		}
	}
	a.DecidedAt, a.DecisionReason = &now, d.Reason
	a.State = ApprovalDenied
	if d.Approve {
		a.State = ApprovalApproved
	}
	if err := s.st.DecideApproval(ctx, a); err != nil {
		if d.Approve && !held {
			<-s.slots
		}
		return nil, err
	}
	s.approvals.remove(a.ID)
	if !d.Approve {
		msg := "a reviewer denied the call"
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		s.failPending(e, ReasonApprovalDenied, msg)
		return a, nil
	}
	e.mu.Lock()
	if e.job.State != StatePendingApproval { // cancelled meanwhile
		e.mu.Unlock()
		if !held {
			<-s.slots
		}
		return a, nil
	}
	e.job.State = StateQueued
	s.storeUpdate(e.job)
	snap := cloneJob(e.job)
	e.events.emit(Event{Type: EventQueued, Time: now, Job: snap})
	e.leftPending()
	e.mu.Unlock()
	if held { // approved: it waits for its batch's Release
		s.log.Info("call approved, held for its batch", "job", snap.ID, "approval", a.ID, "tenant", tenant)
		return a, nil
	}
	if snap.SessionID != "" {
		if ls := s.liveSession(snap.SessionID); ls != nil {
			ls.join(snap.ID)
		}
	}
	s.m.queueDepth.Inc()
	s.sched.push(e)
	s.log.Info("call approved", "job", snap.ID, "approval", a.ID, "tenant", tenant)
	return a, nil
}

// failPending ends a pending_approval job (denied, expired, cancelled)
// and gives its reserved units back.
func (s *Service) failPending(e *entry, reason, msg string) {
	e.mu.Lock()
	if e.job.State != StatePendingApproval {
		e.mu.Unlock()
		return
	}
	j := e.job
	now := time.Now().UTC()
	s.refund(j)
	j.State, j.Reason, j.FinishedAt = StateFailed, reason, &now
	if reason == ReasonCancelled {
		j.State = StateCancelled
	}
	j.Result = &tools.Result{OK: false, Error: msg}
	s.storeUpdate(j)
	snap := cloneJob(j)
	e.leftPending()
	e.mu.Unlock()
	s.finished(e, snap)
}

// cancelPending cancels a job waiting for approval: its approval is
// closed as denied ("cancelled") and the job ends cancelled.
func (s *Service) cancelPending(ctx context.Context, e *entry) {
	id := e.snapshot().ID
	if a, ok := s.approvals.forJob(id); ok {
		now := time.Now().UTC()
		a.State, a.DecidedAt, a.DecisionReason = ApprovalDenied, &now, "the job was cancelled"
		if err := s.st.DecideApproval(ctx, a); err != nil && !errors.Is(err, ErrConflict) {
			s.log.Error("close approval of cancelled job", "approval", a.ID, "err", err)
		}
		s.approvals.remove(a.ID)
	}
	s.failPending(e, ReasonCancelled, "cancelled before it was approved")
}

// expireApproval marks a pending approval expired and fails its job.
func (s *Service) expireApproval(a *Approval) {
	now := time.Now().UTC()
	exp := *a
	exp.State, exp.DecidedAt, exp.DecisionReason = ApprovalExpired, &now, "nobody decided before "+a.ExpiresAt.Format(time.RFC3339)
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.st.DecideApproval(ctx, &exp); err != nil {
		if !errors.Is(err, ErrConflict) {
			s.log.Error("expire approval", "approval", a.ID, "err", err)
			return
		}
	}
	s.approvals.remove(a.ID)
	if e := s.entry(a.JobID); e != nil {
		s.failPending(e, ReasonApprovalExpired, fmt.Sprintf("the call needed a human's approval and nobody approved it within %s", a.ExpiresAt.Sub(a.CreatedAt).Round(time.Second)))
	}
	s.log.Info("approval expired", "approval", a.ID, "job", a.JobID, "tenant", a.Tenant)
}

// expireApprovals runs until quit, expiring approvals past their time.
func (s *Service) expireApprovals() {
	t := time.NewTicker(s.cfg.ApprovalSweep)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			for _, a := range s.approvals.due(time.Now()) {
				s.expireApproval(a)
			}
		}
	}
}

// restoreGuard re-applies the spends of jobs still inside their budget
// windows (after a restart), and re-registers pending approvals.
func (s *Service) restoreGuard(ctx context.Context) error {
	if s.cfg.Guard == nil || s.atomic != nil { // the store holds the counts
		return nil
	}
	since := time.Now().Add(-s.cfg.GuardLookback)
	spends, err := s.st.ListSpends(ctx, since)
	if err != nil {
		return fmt.Errorf("start: restore guard budgets: %w", err)
	}
	s.cfg.Guard.Restore(spends)
	if len(spends) > 0 {
		s.log.Info("restored guard budgets", "spends", len(spends))
	}
	return nil
}
