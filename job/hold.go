package job

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// What the turn executor (turn.go) needs from the service beyond
// Submit/Get/Wait: the guard's decisions for a whole batch before anything
// runs, and calls that wait for approval without entering the queue once
// approved (SubmitRequest.Hold) until their batch releases them.

// DecideBatch asks the guard about every call of a batch, in order, before
// any of them is submitted: each decision reserves its units (allow,
// confirm), so a budget with 3 units left lets exactly the first 3 calls
// through. Give each decision to Submit (SubmitRequest.Decision), or to
// RefundDecision for a call that will not be submitted. A tenant without a
// policy gets allow for every call.
func (s *Service) DecideBatch(tenant, session string, ts []*tools.Tool) []policy.Decision {
	out := make([]policy.Decision, len(ts))
	for i, t := range ts {
		if !s.guardEnabled(tenant) {
			out[i] = policy.Decision{Outcome: policy.OutcomeAllow}
			continue
		}
		req := policy.Request{Tenant: tenant, Session: session, Tool: t.Name, Effects: t.Effects}
		if s.atomic != nil { // reserved in the store now, in the batch's order
			plan := s.cfg.Guard.Plan(req)
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			d, ok := s.spendNow(ctx, req, plan, s.planCharge(plan, false))
			cancel()
			if ok {
				d.Rate = nil // taken
			}
			out[i] = d
			continue
		}
		out[i] = s.cfg.Guard.Decide(req)
	}
	return out
}

// RefundDecision gives back what a decision from DecideBatch reserved, for
// a call that was never submitted.
func (s *Service) RefundDecision(d *policy.Decision) {
	if d == nil || len(d.Spend) == 0 || s.cfg.Guard == nil {
		return
	}
	if s.atomic != nil {
		s.refundShared(d.Spend)
	} else {
		s.cfg.Guard.Refund(d.Spend)
	}
	d.Spend = nil
}

// isClosed reports whether Shutdown has begun.
func (s *Service) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// held reports whether the job waits for Release once approved.
func (e *entry) held() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hold
}

// leftPending wakes AwaitDecision; e.mu is held.
func (e *entry) leftPending() {
	if e.decided != nil {
		select {
		case <-e.decided:
		default:
			close(e.decided)
		}
	}
}

// AwaitDecision blocks until the job is no longer pending approval (a
// human approved or denied it, it expired or was cancelled) or ctx ends,
// and returns its snapshot: queued (approved; held jobs wait for Release)
// or terminal.
func (s *Service) AwaitDecision(ctx context.Context, tenant, id string) (*Job, error) {
	e := s.entry(id)
	if e == nil || e.tenant() != tenant {
		return s.Get(ctx, tenant, id)
	}
	e.mu.Lock()
	ch := e.decided
	pending := e.job.State == StatePendingApproval
	e.mu.Unlock()
	if !pending || ch == nil {
		return e.snapshot(), nil
	}
	select {
	case <-ch:
		return e.snapshot(), nil
	case <-ctx.Done():
		return e.snapshot(), ctx.Err()
	}
}

// Release queues a held job that was approved (SubmitRequest.Hold),
// waiting for room in the queue until ctx ends. A job that is not held,
// was released already or is not queued (denied, expired, cancelled) is
// returned as it is.
func (s *Service) Release(ctx context.Context, tenant, id string) (*Job, error) {
	e := s.entry(id)
	if e == nil || e.tenant() != tenant {
		return s.Get(ctx, tenant, id)
	}
	e.mu.Lock()
	if !e.hold || e.released || e.job.State != StateQueued {
		e.mu.Unlock()
		return e.snapshot(), nil
	}
	e.released = true
	session := e.job.SessionID
	e.mu.Unlock()
	unrelease := func(err error) (*Job, error) {
		e.mu.Lock()
		e.released = false
		e.mu.Unlock()
		return e.snapshot(), err
	}
	select { // room in the queue; not under s.mu, which Shutdown takes
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return unrelease(fmt.Errorf("release job %s: %w", id, ctx.Err()))
	case <-s.quit:
		return unrelease(ErrShutdown)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		<-s.slots
		return unrelease(ErrShutdown) // stays queued in the store: runs at the next start
	}
	if session != "" {
		if ls := s.liveSession(session); ls != nil {
			ls.join(id)
		}
	}
	s.m.queueDepth.Inc()
	s.sched.push(e)
	return e.snapshot(), nil
}
