package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// pruneEvery is how often (by the guard's clock) a tenant drops the
// counters of sessions whose windows have all ended and that have no
// tool-limit counts. Pruning runs inside Decide, under the tenant's lock.
const pruneEvery = int64(time.Minute)

// never is the wait of a limit that does not reset (a tool limit).
const never = int64(math.MaxInt64)

// failure kinds, in the order they are checked.
const (
	failNone = iota
	failRate
	failBudget
	failLimit
)

// checkAndReserve runs the rate limit, budgets and tool limits for req
// and reserves them when all pass; t.mu is held.
func (t *tenantGuard) checkAndReserve(req Request, action Action, label int, nowNs int64) Decision {
	failKind, failIdx, failWait := failNone, 0, int64(-1)
	fail := func(kind, idx int, wait int64) {
		if wait > failWait { // the longest wait decides; ties: check order
			failKind, failIdx, failWait = kind, idx, wait
		}
	}

	if t.rate != nil {
		t.refill(nowNs)
		if t.tokens < 1 {
			fail(failRate, 0, int64(math.Ceil((1-t.tokens)/t.rate.Rate*1e9)))
		}
	}
	var sc *sessionCounters
	if req.Session != "" {
		sc = t.sessions[req.Session]
	}
	var rem []Remaining
	for i := range t.budgets {
		b := &t.budgets[i]
		if !t.budgetApplies(b, req) {
			continue
		}
		start, end := windowAt(nowNs, b.per)
		var used int64
		if w := t.budgetWindow(b, sc); w != nil && w.start == start {
			used = w.used
		}
		left := b.limit - used
		if left < 1 {
			fail(failBudget, i, end-nowNs)
		}
		if rem == nil {
			rem = make([]Remaining, 0, len(t.budgets)+len(t.limits))
		}
		rem = append(rem, Remaining{
			Rule: t.labels[b.label], Effect: b.effect, Scope: scopeName(b.session),
			Limit: b.limit, Remaining: left, ResetsAt: time.Unix(0, end).UTC(),
		})
	}
	if req.Session != "" {
		for i := range t.limits {
			l := &t.limits[i]
			if !matchTool(l.tool, l.glob, req.Tool) {
				continue
			}
			var used int64
			if sc != nil {
				used = sc.uses[l.slot]
			}
			left := l.max - used
			if left < 1 {
				fail(failLimit, i, never)
			}
			if rem == nil {
				rem = make([]Remaining, 0, len(t.budgets)+len(t.limits))
			}
			rem = append(rem, Remaining{
				Rule: t.labels[l.label], Tool: l.tool, Scope: ScopeSession, Limit: l.max, Remaining: left,
			})
		}
	}

	if failKind != failNone {
		for i := range rem {
			rem[i].Remaining = max(0, rem[i].Remaining)
		}
		d := Decision{Outcome: OutcomeDeny, Remaining: rem}
		var lbl int
		switch failKind {
		case failRate:
			lbl, d.Code, d.RetryAfter = t.rateIdx, CodeRateLimited, time.Duration(failWait)
			d.Reason = fmt.Sprintf("this tenant's rate limit of %s calls per second (burst %s) is exceeded; retry in %s",
				strconv.FormatFloat(t.rate.Rate, 'f', -1, 64), strconv.FormatFloat(t.burst, 'f', -1, 64), fmtWait(d.RetryAfter))
		case failBudget:
			b := &t.budgets[failIdx]
			lbl, d.Code, d.RetryAfter = b.label, CodeBudgetExhausted, time.Duration(failWait)
			d.Reason = fmt.Sprintf("budget for %s per %s is exhausted (%d per %s); resets in %s",
				b.effect, scopeName(b.session), b.limit, fmtDuration(time.Duration(b.per)), fmtWait(d.RetryAfter))
		case failLimit:
			l := &t.limits[failIdx]
			lbl, d.Code = l.label, CodeUsageLimit
			if l.glob {
				d.Reason = fmt.Sprintf("tools matching %q may be called at most %d times per session; this session has used them all", l.tool, l.max)
			} else {
				d.Reason = fmt.Sprintf("tool %q may be called at most %d times per session; this session has used them all", l.tool, l.max)
			}
		}
		d.Rule = t.labels[lbl]
		t.count(lbl, OutcomeDeny)
		return d
	}

	// Everything passed: reserve it all.
	if t.rate != nil {
		t.tokens--
	}
	var spends []Spend
	if len(rem) > 0 {
		spends = make([]Spend, 0, len(rem))
		for i := range rem {
			rem[i].Remaining--
		}
	}
	for i := range t.budgets {
		b := &t.budgets[i]
		if !b.primary || !t.budgetApplies(b, req) {
			continue
		}
		if b.session && sc == nil {
			sc = t.newSession(req.Session)
		}
		start, end := windowAt(nowNs, b.per)
		w := t.budgetWindow(b, sc)
		if w.start != start {
			*w = window{start: start, end: end}
		}
		w.used++
		s := Spend{Tenant: t.name, Key: b.key, Window: time.Duration(b.per), WindowStart: time.Unix(0, start).UTC(), Units: 1}
		if b.session {
			s.Session = req.Session
		}
		spends = append(spends, s)
	}
	if req.Session != "" {
		for i := range t.limits {
			l := &t.limits[i]
			if !l.primary || !matchTool(l.tool, l.glob, req.Tool) {
				continue
			}
			if sc == nil {
				sc = t.newSession(req.Session)
			}
			sc.uses[l.slot]++
			spends = append(spends, Spend{Tenant: t.name, Session: req.Session, Key: l.key, Units: 1})
		}
	}
	d := Decision{Outcome: OutcomeAllow, Rule: t.labels[label], Remaining: rem, Spend: spends}
	if action == ActionConfirm {
		d.Outcome = OutcomeConfirm
		d.Reason = t.confirmReason(label, req.Tool)
	}
	t.count(label, d.Outcome)
	return d
}

// clock returns wall (UnixNano), or the latest time the tenant has seen
// if the wall clock stepped back: windows and the token bucket only move
// forward. t.mu is held.
func (t *tenantGuard) clock(wall int64) int64 {
	t.seen = max(t.seen, wall)
	return t.seen
}

func (t *tenantGuard) budgetApplies(b *compiledBudget, req Request) bool {
	return hasEffect(req.Effects, b.effect) && (!b.session || req.Session != "")
}

// budgetWindow returns b's counter: the tenant's, or the session's (nil
// when the session has no counters yet).
func (t *tenantGuard) budgetWindow(b *compiledBudget, sc *sessionCounters) *window {
	if !b.session {
		return &t.tenantWin[b.slot]
	}
	if sc == nil {
		return nil
	}
	return &sc.win[b.slot]
}

func (t *tenantGuard) newSession(id string) *sessionCounters {
	sc := &sessionCounters{win: make([]window, t.nSessionWin), uses: make([]int64, t.nUses)}
	t.sessions[id] = sc
	return sc
}

// windowAt returns the fixed window of length per, aligned to the Unix
// epoch, holding now (all UnixNano).
func windowAt(now, per int64) (start, end int64) {
	start = now - now%per
	if now < 0 && now%per != 0 {
		start -= per
	}
	return start, start + per
}

// refill adds the tokens earned since the last refill; t.mu is held.
func (t *tenantGuard) refill(now int64) {
	if elapsed := now - t.last; elapsed > 0 {
		t.tokens = min(t.burst, t.tokens+float64(elapsed)/1e9*t.rate.Rate)
		t.last = now
	}
}

// apply adds units (negative: refunds) to the counter s names.
func (t *tenantGuard) apply(s Spend, units int64, now int64) {
	if units == 0 {
		return
	}
	session := s.Session != ""
	slot, ok := t.slots[counterID{session: session, key: s.Key, window: s.Window}]
	if !ok || (s.Window == 0 && !session) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now = t.clock(now)
	var sc *sessionCounters
	if session {
		if sc = t.sessions[s.Session]; sc == nil {
			if units < 0 {
				return
			}
			sc = t.newSession(s.Session)
		}
	}
	if s.Window == 0 {
		sc.uses[slot] = max(0, sc.uses[slot]+units)
		return
	}
	start := s.WindowStart.UnixNano()
	end := start + int64(s.Window)
	if end <= now {
		return // that window is over
	}
	var w *window
	if session {
		w = &sc.win[slot]
	} else {
		w = &t.tenantWin[slot]
	}
	switch {
	case w.start == start && w.end == end:
		w.used = max(0, w.used+units)
	case start > w.start && units > 0:
		*w = window{start: start, end: end, used: units}
	}
}

// maybePrune drops idle sessions' counters every pruneEvery; t.mu is held.
func (t *tenantGuard) maybePrune(now int64) {
	if now < t.nextPrune {
		return
	}
	t.nextPrune = now + pruneEvery
	for id, sc := range t.sessions {
		if sc.idle(now) {
			delete(t.sessions, id)
		}
	}
}

// idle reports whether the counters hold nothing that still counts.
func (sc *sessionCounters) idle(now int64) bool {
	for _, u := range sc.uses {
		if u > 0 {
			return false
		}
	}
	for _, w := range sc.win {
		if w.used > 0 && w.end > now {
			return false
		}
	}
	return true
}

func scopeName(session bool) string {
	if session {
		return ScopeSession
	}
	return ScopeTenant
}

// fmtWait rounds a wait up to the second (to the millisecond below one
// second) for a reason text.
func fmtWait(d time.Duration) string {
	unit := time.Second
	if d < time.Second {
		unit = time.Millisecond
	}
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return fmtDuration(d)
}
