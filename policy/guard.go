package policy

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/tools"
)

// Outcome is the guard's verdict on a call.
type Outcome string

// Outcomes, also the values of the outcome label of
// sandboxd_guard_decisions_total.
const (
	OutcomeAllow   Outcome = "allow"
	OutcomeDeny    Outcome = "deny"
	OutcomeConfirm Outcome = "confirm" // hold for a human's approval
)

// Codes say why a call was denied (Decision.Code).
const (
	CodeDenied          = "denied"           // a deny rule or a default of deny
	CodeRateLimited     = "rate_limited"     // the tenant's token bucket is empty; retry after RetryAfter
	CodeBudgetExhausted = "budget_exhausted" // an effect budget's window is spent; retry after RetryAfter
	CodeUsageLimit      = "usage_limit"      // a tool limit of the session is reached; retrying will not help
)

// GuardOptions configure a Guard. The zero value is usable.
type GuardOptions struct {
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// Registerer receives the guard's collector; nil: not registered.
	Registerer prometheus.Registerer
}

// Request is one call to decide.
type Request struct {
	Tenant string
	// Session is the session the call runs in; "" for a one-shot job
	// (session budgets and tool limits then do not apply).
	Session string
	Tool    string
	// Effects are the tool's declared effects.
	Effects []tools.Effect
}

// Decision is the guard's verdict on one Request.
type Decision struct {
	Outcome Outcome
	// Code says why the call is not allowed (the Code* constants); "" when
	// Outcome is allow or confirm.
	Code string
	// Rule names the part of the policy that decided: "rules[2]",
	// "default", "rate_limit", "budgets[0]", "tool_limits[1]". For a
	// tenant without a policy it is "".
	Rule string
	// Reason is one sentence for the model (and for the approver when
	// Outcome is confirm); "" when allowed.
	Reason string
	// RetryAfter is when a retry may pass (rate_limited,
	// budget_exhausted); 0 otherwise.
	RetryAfter time.Duration
	// Remaining reports each budget and tool limit that applied to the
	// call: after this call's reservation when allowed or held, as they
	// stand when denied by a limit, nil when denied by a rule.
	Remaining []Remaining
	// Spend lists the units this decision reserved (allow and confirm
	// only). Persist them with the job: give them to Refund when the job
	// never runs, and to Restore after a restart.
	Spend []Spend
	// Rate is the rate limit token a Plan's call takes (nil: no rate
	// limit, or a Decide, which took it in memory).
	Rate *RateCharge
	// Counter (a Plan's) is, for each entry of Remaining, the index in
	// Spend of the counter it reads: its Remaining is its Limit minus
	// that counter's count once spent (Settle).
	Counter []int
}

// Allowed reports whether the call may run now (Outcome allow).
func (d *Decision) Allowed() bool { return d.Outcome == OutcomeAllow }

// Remaining is the state of one budget or tool limit.
type Remaining struct {
	Rule   string       `json:"rule"`             // "budgets[0]" or "tool_limits[1]"
	Effect tools.Effect `json:"effect,omitempty"` // budgets only
	Tool   string       `json:"tool,omitempty"`   // tool limits only: the limit's tool name or glob
	Scope  string       `json:"scope"`            // "tenant" or "session" (tool limits: always session)
	Limit  int64        `json:"limit"`
	// Remaining is how many more calls the limit lets through (never < 0).
	Remaining int64 `json:"remaining"`
	// ResetsAt is the end of the budget's current window; zero for tool
	// limits, which never reset.
	ResetsAt time.Time `json:"resets_at,omitzero"`
}

// Spend is units reserved on one counter. Session is "" for a
// tenant-scoped budget. Key is "effect:<effect>" for a budget (Window and
// WindowStart set) or "tool:<tool limit's tool>" for a tool limit (Window
// 0: the session's life).
type Spend struct {
	Tenant      string        `json:"tenant"`
	Session     string        `json:"session,omitempty"`
	Key         string        `json:"key"`
	Window      time.Duration `json:"window,omitzero"`
	WindowStart time.Time     `json:"window_start,omitzero"`
	Units       int64         `json:"units"`
	// Limit is the counter's limit, set by Plan for the store to check.
	Limit int64 `json:"limit,omitempty"`
}

// Guard decides every call of every tenant against the tenant's policy:
// rules, then the rate limit, budgets and tool limits, all checked and
// reserved atomically under the tenant's lock. It is safe for concurrent
// use. State is in memory only: the job service persists each decision's
// Spend with the job and gives them back with Restore after a restart.
//
// Memory: a tenant's counters are bounded by its policy; a session's are
// dropped once its budget windows have ended and it has no tool-limit
// counts, or by ForgetSession (call it when a session closes).
type Guard struct {
	now     func() time.Time
	tenants map[string]*tenantGuard // read-only after NewGuard
}

// NewGuard validates every tenant's policy and builds the guard. A tenant
// missing from policies has no policy: every call is allowed.
func NewGuard(policies map[string]TenantPolicy, opts GuardOptions) (*Guard, error) {
	g := &Guard{now: opts.Now, tenants: make(map[string]*tenantGuard, len(policies))}
	if g.now == nil {
		g.now = time.Now
	}
	now := g.now()
	for _, name := range slices.Sorted(maps.Keys(policies)) {
		p := policies[name]
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", name, err)
		}
		g.tenants[name] = compileTenant(name, &p, now)
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(&guardCollector{g: g}); err != nil {
			return nil, fmt.Errorf("register guard metrics: %w", err)
		}
	}
	return g, nil
}

// Enabled reports whether the tenant's policy can do anything but allow
// (rules, a default other than allow, budgets, tool limits or a rate
// limit). When false, Decide always allows and records nothing: callers
// may skip it.
func (g *Guard) Enabled(tenant string) bool {
	t := g.tenants[tenant]
	return t != nil && t.enabled
}

// Decide decides req. Rules come first (the first match decides the
// action; none: the default). A deny ends there. Otherwise the rate limit,
// every budget whose effect the call spends and every tool limit matching
// the tool are checked; only when all pass are they all reserved (one unit
// each) and the outcome is the rule's allow or confirm. A confirm reserves
// too, so held calls cannot overrun a budget: Refund them when the
// approval is denied or expires.
//
// When several limits fail, the one that keeps the call out longest
// decides (a tool limit, which never resets, before a budget, before the
// rate limit), so that RetryAfter is never too early.
func (g *Guard) Decide(req Request) Decision {
	t := g.tenants[req.Tenant]
	if t == nil || !t.enabled {
		return Decision{Outcome: OutcomeAllow}
	}
	action, label := t.match(req)
	wall := g.now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock(wall)
	t.maybePrune(now)
	if action == ActionDeny {
		t.count(label, OutcomeDeny)
		return Decision{Outcome: OutcomeDeny, Code: CodeDenied, Rule: t.labels[label], Reason: t.denyReason(label, req.Tool)}
	}
	return t.checkAndReserve(req, action, label, now)
}

// Refund gives back units reserved by Decide for a job that never ran
// (cancelled while queued, approval denied or expired). Spends of a window
// that has since ended, of unknown tenants or of counters the policy no
// longer has are ignored. Refunding twice refunds twice: call it once per
// decision.
func (g *Guard) Refund(spends []Spend) {
	now := g.now().UnixNano()
	for _, s := range spends {
		if t := g.tenants[s.Tenant]; t != nil {
			t.apply(s, -s.Units, now)
		}
	}
}

// Restore re-applies spends persisted before a restart: give it the Spend
// of every job that ran or may still run (not the refunded ones). Spends
// whose window has ended are ignored, as are unknown tenants and counters.
func (g *Guard) Restore(spends []Spend) {
	now := g.now().UnixNano()
	for _, s := range spends {
		if t := g.tenants[s.Tenant]; t != nil {
			t.apply(s, s.Units, now)
		}
	}
}

// ForgetSession drops a session's counters (its session budgets and tool
// limits). Call it when the session closes; a later call in the same
// session starts from zero.
func (g *Guard) ForgetSession(tenant, session string) {
	t := g.tenants[tenant]
	if t == nil || session == "" {
		return
	}
	t.mu.Lock()
	delete(t.sessions, session)
	t.mu.Unlock()
}
