package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// The guard on a shared store (Postgres, one or several replicas): the
// guard decides the rule and the amounts (policy.Guard.Plan), and the
// store checks and spends them in the same statement as the job's insert
// (AtomicSpender), so budgets, tool limits and rate limits are exact
// across replicas. Refunds go to the store too; nothing is restored into
// memory at start. A store without AtomicSpender (SQLite, one process)
// keeps the in-memory guard (policy.Guard.Decide).

// Charge is what a job's insert spends: the plan's counters (each with
// its Limit) and one token of the tenant's rate limit bucket.
type Charge struct {
	Spend []policy.Spend
	Rate  *policy.RateCharge
	// Counter is the plan's policy.Decision.Counter: which Spend each
	// entry of the job's GuardRecord.Remaining reads, for the store to
	// settle them as spent.
	Counter []int
}

// empty reports whether the charge spends nothing.
func (c Charge) empty() bool { return len(c.Spend) == 0 && c.Rate == nil }

// AtomicSpender is a store that checks and spends a guard plan's units
// atomically with a job's insert.
type AtomicSpender interface {
	// CreateSpending inserts j and spends c in one statement: when a
	// counter would pass its Limit or the bucket has no token, nothing is
	// written and the error is a *SpendRefused. capacity > 0 inserts like
	// Coordinator.Enqueue (only while fewer than capacity jobs are queued
	// in the store, ErrQueueFull otherwise, and the replicas are
	// notified, or it is claimed by self as Enqueue does); capacity 0 like
	// Store.Create.
	// used[i] is c.Spend[i]'s counter's count after the spend.
	CreateSpending(ctx context.Context, j *Job, c Charge, capacity int, self *SelfClaim) (used []int64, claimed bool, err error)
	// Spend spends c without a job (the guard's decisions of a tool-call
	// batch, reserved before its calls are submitted; a cache hit's rate
	// limit token): a *SpendRefused when over, nothing spent then.
	// used[i] is c.Spend[i]'s counter's count after the spend.
	Spend(ctx context.Context, c Charge) (used []int64, err error)
	// CheckSpend reads c's counters: a *SpendRefused when they would
	// refuse c now, nil when they would not (a read: nothing spent).
	CheckSpend(ctx context.Context, c Charge) error
	// RefundSpends gives back units spent by CreateSpending for a job
	// that never ran (never below zero; spends of ended windows are
	// ignored).
	// used[i] is spends[i]'s counter's count after it, -1 for a counter
	// the store no longer has.
	RefundSpends(ctx context.Context, spends []policy.Spend) (used []int64, err error)
}

// SpendRefused is CreateSpending's refusal: what the store found.
type SpendRefused struct {
	Spent policy.Spent
}

func (e *SpendRefused) Error() string {
	return "the guard's budgets, tool limits or rate limit refuse the call"
}

// planCharge is what a plan from policy.Guard.Plan spends (empty on the
// in-memory guard, whose Decide reserved in memory, and for a decision
// reserved already: DecideBatch's, given to Submit).
func (s *Service) planCharge(d policy.Decision, reserved bool) Charge {
	if s.atomic == nil || reserved || d.Outcome == policy.OutcomeDeny {
		return Charge{}
	}
	return Charge{Spend: d.Spend, Rate: d.Rate, Counter: d.Counter}
}

// insertJob records a new job: with a charge to spend (a shared guard's
// plan), in the same statement as the spend; capacity as in
// AtomicSpender.CreateSpending (0: Store.Create; > 0: the shared queue).
// The job's GuardRecord.Spend is the charge's once spent, and nil when
// the insert failed (then nothing was spent: nothing to refund).
//
// mine (shared queue, no charge: enqueueShared) is true when this
// replica holds a worker for the job and must start it.
func (s *Service) insertJob(ctx context.Context, j *Job, c Charge, capacity int) (mine bool, err error) {
	if a := s.atomic; a != nil && !c.empty() && j.Guard != nil {
		if capacity > 0 && s.rep != nil && s.rep.lost.Load() {
			return false, fmt.Errorf("submit: %w: this replica lost its lease", ErrShutdown)
		}
		j.Guard.Spend = c.Spend // recorded with the row: a refund anywhere gives these back
		var self *SelfClaim
		if capacity > 0 && s.rep != nil {
			self = s.selfClaim(j)
		}
		used, claimed, err := a.CreateSpending(ctx, j, c, capacity, self)
		if mine := s.settleSelfClaim(self, claimed, err); mine && err != nil {
			return true, err // perhaps spent and recorded: the caller starts it
		}
		if errors.Is(err, ErrQueueFull) {
			// A call the guard would refuse is refused by it, not by the
			// full queue, as with the in-memory guard, which decides first.
			if cerr := a.CheckSpend(ctx, c); cerr != nil {
				if _, ok := asRefused(cerr); ok {
					err = cerr
				}
			}
		}
		if err != nil {
			j.Guard.Spend = nil // one statement: nothing was spent
			s.observeRefusal(c, err)
			return false, err
		}
		s.cfg.Guard.Observe(c.Spend, used)
		if capacity > 0 && s.rep != nil && !claimed {
			s.rep.poke()
		}
		return claimed, nil
	}
	if capacity > 0 {
		return s.enqueueShared(ctx, j)
	}
	return false, s.st.Create(ctx, j)
}

// spendNow spends c without a job's insert (shared guard only); a refusal
// is the deny Decide would have returned, and a store that cannot count
// refuses too (retry), never lets the call through uncounted.
func (s *Service) spendNow(ctx context.Context, req policy.Request, plan policy.Decision, c Charge) (policy.Decision, bool) {
	if c.empty() {
		return plan, true
	}
	used, err := s.atomic.Spend(ctx, c)
	s.observeRefusal(c, err)
	if err == nil {
		s.cfg.Guard.Observe(c.Spend, used)
		plan.Remaining = slices.Clone(plan.Remaining)
		policy.Settle(&plan, used)
		return plan, true
	}
	if r, ok := asRefused(err); ok {
		if r.Spent.Now.IsZero() {
			r.Spent.Now = time.Now()
		}
		return s.cfg.Guard.Refusal(req, plan, r.Spent), false
	}
	s.log.Error("spend guard units", "err", err, "tenant", req.Tenant, "tool", req.Tool)
	return policy.Decision{Outcome: policy.OutcomeDeny, Code: policy.CodeRateLimited, Rule: plan.Rule, RetryAfter: time.Second,
		Reason: "the guard's counters could not be updated (the store is unavailable); retry in 1s"}, false
}

// refusedBySpend turns a store's refusal into the guard's deny and
// records the job refused. The job's plan spent nothing.
func (s *Service) refusedBySpend(ctx context.Context, j *Job, tool *tools.Tool, plan policy.Decision, r *SpendRefused) (*Job, bool, error) {
	req := policy.Request{Tenant: j.Tenant, Session: j.SessionID, Tool: tool.Name, Effects: tool.Effects}
	if r.Spent.Now.IsZero() {
		r.Spent.Now = time.Now()
	}
	d := s.cfg.Guard.Refusal(req, plan, r.Spent)
	j.Guard = s.record(j, d, j.CreatedAt)
	j.State = StateQueued
	return s.submitRefused(ctx, j, d)
}

// asRefused returns err's *SpendRefused.
func asRefused(err error) (*SpendRefused, bool) {
	var r *SpendRefused
	ok := errors.As(err, &r)
	return r, ok
}

// refundShared gives a job's spends back to the store.
func (s *Service) refundShared(spends []policy.Spend) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	used, err := s.atomic.RefundSpends(ctx, spends)
	if err != nil {
		s.log.Error("refund guard spends", "err", fmt.Errorf("refund: %w", err), "spends", len(spends))
		return
	}
	s.cfg.Guard.Observe(spends, used)
}

// observeRefusal gives the guard's metrics the counts a refusal found.
func (s *Service) observeRefusal(c Charge, err error) {
	if r, ok := asRefused(err); ok {
		s.cfg.Guard.Observe(c.Spend, r.Spent.Used)
	}
}
