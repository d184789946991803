package policy

import (
	"fmt"
	"strconv"
	"time"
)

// Plan and Refusal are the guard for a shared store (several replicas on
// one Postgres): the guard decides the rule and the amounts, the store
// checks and spends them atomically with the job's insert. Plan does what
// Decide does without the counters: rules decide (a deny ends there), and
// an allow or confirm lists the units to spend, each with the counter's
// Limit, and the rate limit's bucket (Decision.Rate). Nothing is reserved
// in memory: the store refuses when a counter would pass its Limit or the
// bucket is empty, and Refusal turns that into the deny Decide would have
// returned.

// RateCharge is one token of a tenant's rate limit bucket, for the store
// to take.
type RateCharge struct {
	Tenant string
	Rate   float64 // tokens per second
	Burst  float64
}

// Plan decides req's rule and lists what it would spend (Decision.Spend,
// each Spend's Limit set; Decision.Rate), reserving nothing. Remaining
// lists the applying limits with Remaining unknown (-1): the store knows.
func (g *Guard) Plan(req Request) Decision {
	t := g.tenants[req.Tenant]
	if t == nil || !t.enabled {
		return Decision{Outcome: OutcomeAllow}
	}
	action, label := t.match(req)
	now := g.now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	now = t.clock(now)
	if action == ActionDeny {
		t.count(label, OutcomeDeny)
		return Decision{Outcome: OutcomeDeny, Code: CodeDenied, Rule: t.labels[label], Reason: t.denyReason(label, req.Tool)}
	}
	d := Decision{Outcome: OutcomeAllow, Rule: t.labels[label]}
	if t.rate != nil {
		d.Rate = &RateCharge{Tenant: t.name, Rate: t.rate.Rate, Burst: t.burst}
	}
	// One Spend per counter; budgets sharing a counter spend it once, at
	// the smallest of their limits.
	idx := map[counterID]int{}
	for i := range t.budgets {
		b := &t.budgets[i]
		if !t.budgetApplies(b, req) {
			continue
		}
		start, end := windowAt(now, b.per)
		d.Remaining = append(d.Remaining, Remaining{
			Rule: t.labels[b.label], Effect: b.effect, Scope: scopeName(b.session),
			Limit: b.limit, Remaining: -1, ResetsAt: time.Unix(0, end).UTC(),
		})
		id := counterID{session: b.session, key: b.key, window: time.Duration(b.per)}
		if k, ok := idx[id]; ok {
			d.Spend[k].Limit = min(d.Spend[k].Limit, b.limit)
			d.Counter = append(d.Counter, k)
			continue
		}
		d.Counter = append(d.Counter, len(d.Spend))
		s := Spend{Tenant: t.name, Key: b.key, Window: time.Duration(b.per), WindowStart: time.Unix(0, start).UTC(), Units: 1, Limit: b.limit}
		if b.session {
			s.Session = req.Session
		}
		idx[id] = len(d.Spend)
		d.Spend = append(d.Spend, s)
	}
	if req.Session != "" {
		for i := range t.limits {
			l := &t.limits[i]
			if !matchTool(l.tool, l.glob, req.Tool) {
				continue
			}
			d.Remaining = append(d.Remaining, Remaining{
				Rule: t.labels[l.label], Tool: l.tool, Scope: ScopeSession, Limit: l.max, Remaining: -1,
			})
			id := counterID{session: true, key: l.key}
			if k, ok := idx[id]; ok {
				d.Spend[k].Limit = min(d.Spend[k].Limit, l.max)
				d.Counter = append(d.Counter, k)
				continue
			}
			d.Counter = append(d.Counter, len(d.Spend))
			idx[id] = len(d.Spend)
			d.Spend = append(d.Spend, Spend{Tenant: t.name, Session: req.Session, Key: l.key, Units: 1, Limit: l.max})
		}
	}
	if action == ActionConfirm {
		d.Outcome = OutcomeConfirm
		d.Reason = t.confirmReason(label, req.Tool)
	}
	t.count(label, d.Outcome)
	return d
}

// Settle fills a plan's Remaining from the counts of its counters once
// spent (used[i]: plan.Spend[i]'s count including this call).
func Settle(plan *Decision, used []int64) {
	for i, k := range plan.Counter {
		if i < len(plan.Remaining) && k < len(used) {
			plan.Remaining[i].Remaining = max(0, plan.Remaining[i].Limit-used[k])
		}
	}
}

// Observe records the counts a store reported for tenant-scoped budget
// windows (used[i]: spends[i]'s counter), so that the guard's metrics
// (sandboxd_guard_budget_remaining) show the store's count as of this
// process's last spend, refund or refusal. Plan and Refusal never read
// them. Session counters are not kept.
func (g *Guard) Observe(spends []Spend, used []int64) {
	for i, s := range spends {
		t := g.tenants[s.Tenant]
		if t == nil || i >= len(used) || used[i] < 0 || s.Session != "" || s.Window <= 0 {
			continue
		}
		slot, ok := t.slots[counterID{key: s.Key, window: s.Window}]
		if !ok {
			continue
		}
		start := s.WindowStart.UnixNano()
		t.mu.Lock()
		if w := &t.tenantWin[slot]; start >= w.start {
			*w = window{start: start, end: start + int64(s.Window), used: used[i]}
		}
		t.mu.Unlock()
	}
}

// Spent is what the store found when it refused a plan: Used[i] is the
// count of plan.Spend[i]'s counter before this call; Tokens the rate
// bucket's tokens (after refilling) before it, when the plan had a Rate.
type Spent struct {
	Used   []int64
	Tokens float64
	// Now is the store's clock when it refused.
	Now time.Time
}

// Refusal is the deny Decide would have returned for plan (from Plan of
// req) given what the store found: the limit keeping the call out longest
// decides (a tool limit before a budget before the rate limit). A plan
// nothing in st refuses is refused as rate limited for a second (the
// store raced: retry).
func (g *Guard) Refusal(req Request, plan Decision, st Spent) Decision {
	t := g.tenants[req.Tenant]
	if t == nil {
		return Decision{Outcome: OutcomeDeny, Code: CodeRateLimited, Reason: "the call could not be counted; retry", RetryAfter: time.Second}
	}
	now := st.Now.UnixNano()
	used := func(s Spend) int64 {
		for i := range plan.Spend {
			p := plan.Spend[i]
			if p.Key == s.Key && p.Session == s.Session && p.Window == s.Window && i < len(st.Used) {
				return st.Used[i]
			}
		}
		return 0
	}
	d := Decision{Outcome: OutcomeDeny}
	wait := int64(-1)
	var lbl int
	// Remaining as it stands.
	for i := range t.budgets {
		b := &t.budgets[i]
		if !t.budgetApplies(b, req) {
			continue
		}
		_, end := windowAt(now, b.per)
		s := Spend{Key: b.key, Window: time.Duration(b.per)}
		if b.session {
			s.Session = req.Session
		}
		left := b.limit - used(s)
		d.Remaining = append(d.Remaining, Remaining{
			Rule: t.labels[b.label], Effect: b.effect, Scope: scopeName(b.session),
			Limit: b.limit, Remaining: max(0, left), ResetsAt: time.Unix(0, end).UTC(),
		})
		if left < 1 && end-now > wait {
			wait, lbl = end-now, b.label
			d.Code, d.RetryAfter = CodeBudgetExhausted, time.Duration(end-now)
			d.Reason = fmt.Sprintf("budget for %s per %s is exhausted (%d per %s); resets in %s",
				b.effect, scopeName(b.session), b.limit, fmtDuration(time.Duration(b.per)), fmtWait(d.RetryAfter))
		}
	}
	if req.Session != "" {
		for i := range t.limits {
			l := &t.limits[i]
			if !matchTool(l.tool, l.glob, req.Tool) {
				continue
			}
			left := l.max - used(Spend{Key: l.key, Session: req.Session})
			d.Remaining = append(d.Remaining, Remaining{Rule: t.labels[l.label], Tool: l.tool, Scope: ScopeSession, Limit: l.max, Remaining: max(0, left)})
			if left < 1 && never > wait {
				wait, lbl = never, l.label
				d.Code, d.RetryAfter = CodeUsageLimit, 0
				if l.glob {
					d.Reason = fmt.Sprintf("tools matching %q may be called at most %d times per session; this session has used them all", l.tool, l.max)
				} else {
					d.Reason = fmt.Sprintf("tool %q may be called at most %d times per session; this session has used them all", l.tool, l.max)
				}
			}
		}
	}
	if wait < 0 && t.rate != nil && plan.Rate != nil && st.Tokens < 1 {
		lbl, d.Code = t.rateIdx, CodeRateLimited
		d.RetryAfter = time.Duration((1 - st.Tokens) / t.rate.Rate * 1e9)
		d.RetryAfter = max(d.RetryAfter, time.Millisecond)
		d.Reason = fmt.Sprintf("this tenant's rate limit of %s calls per second (burst %s) is exceeded; retry in %s",
			strconv.FormatFloat(t.rate.Rate, 'f', -1, 64), strconv.FormatFloat(t.burst, 'f', -1, 64), fmtWait(d.RetryAfter))
		wait = 0
	}
	planned := -1
	for i, l := range t.labels {
		if l == plan.Rule {
			planned = i
			break
		}
	}
	if wait < 0 {
		d.Code, d.RetryAfter, lbl = CodeRateLimited, time.Second, max(planned, 0)
		d.Reason = "the call raced other calls for the tenant's last units; retry in 1s"
	}
	d.Rule = t.labels[lbl]
	t.mu.Lock()
	if planned >= 0 { // Plan counted the call as plan.Outcome
		if c := &t.decisions[planned*numOutcomes+outcomeIndex(plan.Outcome)]; *c > 0 {
			*c--
		}
	}
	t.count(lbl, OutcomeDeny)
	t.mu.Unlock()
	return d
}
