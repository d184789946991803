package policy

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// fakeClock is an injectable clock; safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at a round hour, so "1h" windows start now.
func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newGuard(t testing.TB, clock *fakeClock, p TenantPolicy) *Guard {
	t.Helper()
	g, err := NewGuard(map[string]TenantPolicy{"acme": p}, GuardOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func req(tool string, effects ...tools.Effect) Request {
	return Request{Tenant: "acme", Session: "s1", Tool: tool, Effects: effects}
}

const (
	http  = tools.EffectHTTP
	exec  = tools.EffectExec
	fread = tools.EffectFileRead
	fwrit = tools.EffectFileWrite
)

func TestGuardRules(t *testing.T) {
	t.Parallel()
	rules := []Rule{
		{Tool: "shell", Action: ActionDeny, Reason: "no shells here"},      // rules[0]
		{Tool: "file_*", Effect: fwrit, Action: ActionConfirm},             // rules[1]
		{Effect: http, Action: ActionConfirm, Reason: "web needs a human"}, // rules[2]
		{Tool: "file_*", Action: ActionAllow},                              // rules[3]
		{Effect: exec, Action: ActionDeny},                                 // rules[4]
	}
	for _, tc := range []struct {
		name     string
		def      Action
		req      Request
		outcome  Outcome
		code     string
		rule     string
		inReason string
	}{
		{"deny by tool", "", req("shell", exec), OutcomeDeny, CodeDenied, "rules[0]", "no shells here"},
		{"tool and effect both match", "", req("file_write", fwrit), OutcomeConfirm, "", "rules[1]", `tool "file_write" needs a human's approval`},
		{"tool matches, effect not", "", req("file_read", fread), OutcomeAllow, "", "rules[3]", ""},
		{"effect among several", "", req("fetch", fread, http), OutcomeConfirm, "", "rules[2]", "web needs a human"},
		{"first match wins", "", req("file_fetch", http), OutcomeConfirm, "", "rules[2]", ""},
		{"effect deny, default reason", "", req("python", exec), OutcomeDeny, CodeDenied, "rules[4]", `tool "python" is denied`},
		{"no match, default allow", "", req("calculator"), OutcomeAllow, "", "default", ""},
		{"no match, explicit allow", ActionAllow, req("calculator"), OutcomeAllow, "", "default", ""},
		{"no match, default deny", ActionDeny, req("calculator"), OutcomeDeny, CodeDenied, "default", `tool "calculator" is not allowed`},
		{"no match, default confirm", ActionConfirm, req("calculator"), OutcomeConfirm, "", "default", "approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGuard(t, newClock(), TenantPolicy{Default: tc.def, Rules: rules})
			d := g.Decide(tc.req)
			if d.Outcome != tc.outcome || d.Code != tc.code || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.inReason) {
				t.Fatalf("got %+v", d)
			}
			if tc.outcome == OutcomeAllow && d.Reason != "" {
				t.Errorf("allowed with a reason: %q", d.Reason)
			}
			if d.Spend != nil || d.Remaining != nil {
				t.Errorf("no limits configured, yet %+v", d)
			}
		})
	}
}

func TestGuardDisabled(t *testing.T) {
	t.Parallel()
	g, err := NewGuard(map[string]TenantPolicy{
		"empty":       {},
		"egress-only": {Egress: EgressPolicy{Allow: []EgressRule{{Host: "example.com"}}}},
		"ruled":       {Rules: []Rule{{Tool: "x", Action: ActionDeny}}},
	}, GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]bool{"empty": false, "egress-only": false, "ruled": true, "unknown": false} {
		if got := g.Enabled(tenant); got != want {
			t.Errorf("Enabled(%q) = %v, want %v", tenant, got, want)
		}
	}
	d := g.Decide(Request{Tenant: "unknown", Tool: "x", Effects: []tools.Effect{exec}})
	if d.Outcome != OutcomeAllow || d.Rule != "" || d.Spend != nil {
		t.Errorf("unknown tenant: %+v", d)
	}
}

func TestNewGuardRejectsInvalidPolicy(t *testing.T) {
	t.Parallel()
	_, err := NewGuard(map[string]TenantPolicy{"acme": {Rules: []Rule{{Tool: "x", Action: "maybe"}}}}, GuardOptions{})
	if err == nil || !strings.Contains(err.Error(), `tenant "acme": policy.rules[0].action`) {
		t.Fatalf("err = %v", err)
	}
}

func TestGuardBudgetTenant(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{Budgets: []Budget{{Effect: http, Limit: 3, Per: Duration(time.Hour)}}})
	clock.Advance(47*time.Minute + 57*time.Second) // 06:47:57; window 06:00-07:00
	windowStart := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

	for i := range 3 {
		// Different sessions and none: a tenant budget counts them all.
		r := req("fetch", http, fread)
		r.Session = []string{"", "s1", "s2"}[i]
		d := g.Decide(r)
		if d.Outcome != OutcomeAllow || d.Rule != "default" {
			t.Fatalf("call %d: %+v", i, d)
		}
		want := Spend{Tenant: "acme", Key: "effect:http", Window: time.Hour, WindowStart: windowStart, Units: 1}
		if len(d.Spend) != 1 || d.Spend[0] != want {
			t.Fatalf("call %d spend: %+v", i, d.Spend)
		}
		rem := Remaining{Rule: "budgets[0]", Effect: http, Scope: ScopeTenant, Limit: 3, Remaining: int64(2 - i), ResetsAt: windowStart.Add(time.Hour)}
		if len(d.Remaining) != 1 || d.Remaining[0] != rem {
			t.Fatalf("call %d remaining: %+v", i, d.Remaining)
		}
	}
	// A call without the effect is not counted.
	if d := g.Decide(req("calc", exec)); d.Outcome != OutcomeAllow || d.Spend != nil || d.Remaining != nil {
		t.Fatalf("other effect: %+v", d)
	}
	d := g.Decide(req("fetch", http))
	if d.Outcome != OutcomeDeny || d.Code != CodeBudgetExhausted || d.Rule != "budgets[0]" || d.Spend != nil {
		t.Fatalf("over budget: %+v", d)
	}
	if d.RetryAfter != 12*time.Minute+3*time.Second {
		t.Errorf("RetryAfter = %v", d.RetryAfter)
	}
	if want := "budget for http per tenant is exhausted (3 per 1h); resets in 12m3s"; d.Reason != want {
		t.Errorf("reason %q, want %q", d.Reason, want)
	}
	if len(d.Remaining) != 1 || d.Remaining[0].Remaining != 0 {
		t.Errorf("remaining %+v", d.Remaining)
	}

	// The window rolls over on the hour.
	clock.Advance(d.RetryAfter - time.Nanosecond)
	if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeDeny {
		t.Fatalf("1ns before the window ends: %+v", d)
	}
	clock.Advance(time.Nanosecond)
	d = g.Decide(req("fetch", http))
	if d.Outcome != OutcomeAllow || d.Remaining[0].Remaining != 2 || !d.Spend[0].WindowStart.Equal(windowStart.Add(time.Hour)) {
		t.Fatalf("new window: %+v", d)
	}
}

func TestGuardBudgetSession(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{Budgets: []Budget{{Effect: exec, Limit: 2, Per: Duration(time.Minute), Scope: ScopeSession}}})
	call := func(session string) Decision {
		return g.Decide(Request{Tenant: "acme", Session: session, Tool: "python", Effects: []tools.Effect{exec}})
	}
	for range 2 {
		if d := call("a"); d.Outcome != OutcomeAllow || d.Spend[0].Session != "a" {
			t.Fatalf("%+v", d)
		}
	}
	d := call("a")
	if d.Outcome != OutcomeDeny || d.Code != CodeBudgetExhausted || !strings.Contains(d.Reason, "exec per session") {
		t.Fatalf("session a over budget: %+v", d)
	}
	if d := call("b"); d.Outcome != OutcomeAllow {
		t.Fatalf("session b has its own budget: %+v", d)
	}
	// Outside a session the session budget does not apply.
	for range 5 {
		if d := call(""); d.Outcome != OutcomeAllow || d.Spend != nil || d.Remaining != nil {
			t.Fatalf("no session: %+v", d)
		}
	}
	g.ForgetSession("acme", "a")
	if d := call("a"); d.Outcome != OutcomeAllow || d.Remaining[0].Remaining != 1 {
		t.Fatalf("forgotten session starts over: %+v", d)
	}
}

// TestGuardSharedCounter: two budgets on the same effect, window and scope
// share one counter (one Spend) but each keeps its own limit.
func TestGuardSharedCounter(t *testing.T) {
	t.Parallel()
	g := newGuard(t, newClock(), TenantPolicy{Budgets: []Budget{
		{Effect: http, Limit: 5, Per: Duration(time.Hour)},
		{Effect: http, Limit: 2, Per: Duration(time.Hour), Scope: ScopeTenant},
		{Effect: http, Limit: 10, Per: Duration(24 * time.Hour)},
	}})
	for i := range 2 {
		d := g.Decide(req("fetch", http))
		if d.Outcome != OutcomeAllow || len(d.Spend) != 2 || len(d.Remaining) != 3 {
			t.Fatalf("call %d: %+v", i, d)
		}
		if got := []int64{d.Remaining[0].Remaining, d.Remaining[1].Remaining, d.Remaining[2].Remaining}; got[0] != int64(4-i) || got[1] != int64(1-i) || got[2] != int64(9-i) {
			t.Fatalf("call %d remaining %v", i, got)
		}
	}
	d := g.Decide(req("fetch", http))
	if d.Outcome != OutcomeDeny || d.Rule != "budgets[1]" {
		t.Fatalf("%+v", d)
	}
}

func TestGuardToolLimits(t *testing.T) {
	t.Parallel()
	g := newGuard(t, newClock(), TenantPolicy{ToolLimits: []ToolLimit{
		{Tool: "python_repl", MaxCalls: 2},
		{Tool: "*", MaxCalls: 3},
	}})
	call := func(session, tool string) Decision {
		return g.Decide(Request{Tenant: "acme", Session: session, Tool: tool})
	}
	d := call("s1", "python_repl")
	if d.Outcome != OutcomeAllow || len(d.Spend) != 2 || d.Spend[0] != (Spend{Tenant: "acme", Session: "s1", Key: "tool:python_repl", Units: 1}) ||
		d.Spend[1].Key != "tool:*" {
		t.Fatalf("%+v", d)
	}
	if d := call("s1", "python_repl"); d.Outcome != OutcomeAllow || d.Remaining[0].Remaining != 0 || d.Remaining[1].Remaining != 1 {
		t.Fatalf("%+v", d)
	}
	d = call("s1", "python_repl")
	if d.Outcome != OutcomeDeny || d.Code != CodeUsageLimit || d.Rule != "tool_limits[0]" || d.RetryAfter != 0 ||
		d.Reason != `tool "python_repl" may be called at most 2 times per session; this session has used them all` {
		t.Fatalf("%+v", d)
	}
	if d := call("s1", "calculator"); d.Outcome != OutcomeAllow {
		t.Fatalf("other tool: %+v", d)
	}
	d = call("s1", "calculator")
	if d.Outcome != OutcomeDeny || d.Rule != "tool_limits[1]" || !strings.Contains(d.Reason, `tools matching "*"`) {
		t.Fatalf("glob limit: %+v", d)
	}
	if d := call("s2", "python_repl"); d.Outcome != OutcomeAllow {
		t.Fatalf("other session: %+v", d)
	}
	if d := call("", "python_repl"); d.Outcome != OutcomeAllow || d.Spend != nil {
		t.Fatalf("no session: %+v", d)
	}
}

func TestGuardRateLimit(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{RateLimit: &RateLimit{Rate: 2, Burst: 3}})
	for i := range 3 {
		if d := g.Decide(req("calc")); d.Outcome != OutcomeAllow {
			t.Fatalf("burst call %d: %+v", i, d)
		}
	}
	d := g.Decide(req("calc"))
	if d.Outcome != OutcomeDeny || d.Code != CodeRateLimited || d.Rule != "rate_limit" || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("%+v", d)
	}
	if want := "this tenant's rate limit of 2 calls per second (burst 3) is exceeded; retry in 500ms"; d.Reason != want {
		t.Errorf("reason %q", d.Reason)
	}
	clock.Advance(250 * time.Millisecond)
	if d := g.Decide(req("calc")); d.Outcome != OutcomeDeny || d.RetryAfter != 250*time.Millisecond {
		t.Fatalf("half a token: %+v", d)
	}
	clock.Advance(250 * time.Millisecond)
	if d := g.Decide(req("calc")); d.Outcome != OutcomeAllow {
		t.Fatalf("refilled: %+v", d)
	}
	// Refill stops at the burst.
	clock.Advance(time.Hour)
	for i := range 3 {
		if d := g.Decide(req("calc")); d.Outcome != OutcomeAllow {
			t.Fatalf("call %d after an hour: %+v", i, d)
		}
	}
	if d := g.Decide(req("calc")); d.Outcome != OutcomeDeny {
		t.Fatalf("burst is the cap: %+v", d)
	}
}

func TestGuardRateLimitDefaultBurst(t *testing.T) {
	t.Parallel()
	g := newGuard(t, newClock(), TenantPolicy{RateLimit: &RateLimit{Rate: 0.1}})
	if d := g.Decide(req("calc")); d.Outcome != OutcomeAllow {
		t.Fatal(d)
	}
	if d := g.Decide(req("calc")); d.Outcome != OutcomeDeny || d.RetryAfter != 10*time.Second {
		t.Fatalf("%+v", d)
	}
}

// TestGuardAllOrNothing: a failing limit reserves nothing else, the rate
// limiter's token included.
func TestGuardAllOrNothing(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{
		RateLimit:  &RateLimit{Rate: 1, Burst: 2},
		Budgets:    []Budget{{Effect: http, Limit: 1, Per: Duration(time.Hour)}, {Effect: exec, Limit: 10, Per: Duration(time.Hour)}},
		ToolLimits: []ToolLimit{{Tool: "fetch", MaxCalls: 10}},
	})
	if d := g.Decide(req("fetch", http, exec)); d.Outcome != OutcomeAllow || len(d.Spend) != 3 {
		t.Fatalf("%+v", d)
	}
	for range 5 {
		d := g.Decide(req("fetch", http, exec))
		if d.Outcome != OutcomeDeny || d.Rule != "budgets[0]" {
			t.Fatalf("%+v", d)
		}
		if d.Remaining[1].Remaining != 9 || d.Remaining[2].Remaining != 9 {
			t.Fatalf("a denied call reserved something: %+v", d.Remaining)
		}
	}
	// One token left in the bucket (burst 2, one call allowed).
	if d := g.Decide(req("run", exec)); d.Outcome != OutcomeAllow || d.Remaining[0].Remaining != 8 {
		t.Fatalf("%+v", d)
	}
	if d := g.Decide(req("run", exec)); d.Code != CodeRateLimited {
		t.Fatalf("%+v", d)
	}
}

// TestGuardLongestWaitDecides: when several limits fail, the one that
// blocks longest is reported, so RetryAfter is never too early.
func TestGuardLongestWaitDecides(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{
		RateLimit: &RateLimit{Rate: 1, Burst: 1},
		Budgets: []Budget{
			{Effect: exec, Limit: 1, Per: Duration(time.Minute)},
			{Effect: http, Limit: 1, Per: Duration(time.Hour)},
		},
		ToolLimits: []ToolLimit{{Tool: "b", MaxCalls: 1}},
	})
	g.Decide(req("a", exec, http))
	if d := g.Decide(req("a", exec, http)); d.Rule != "budgets[1]" || d.RetryAfter != time.Hour {
		t.Fatalf("%+v", d)
	}
	clock.Advance(2 * time.Second)
	g.Decide(req("b"))
	clock.Advance(2 * time.Second)
	if d := g.Decide(req("b", exec, http)); d.Code != CodeUsageLimit {
		t.Fatalf("%+v", d)
	}
}

func TestGuardConfirmReservesAndRefund(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{
		Rules:      []Rule{{Effect: http, Action: ActionConfirm}},
		Budgets:    []Budget{{Effect: http, Limit: 2, Per: Duration(time.Hour)}},
		ToolLimits: []ToolLimit{{Tool: "fetch", MaxCalls: 2}},
	})
	a := g.Decide(req("fetch", http))
	b := g.Decide(req("fetch", http))
	if a.Outcome != OutcomeConfirm || b.Outcome != OutcomeConfirm || len(a.Spend) != 2 {
		t.Fatalf("%+v %+v", a, b)
	}
	if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeDeny {
		t.Fatalf("pending approvals hold the budget: %+v", d)
	}
	g.Refund(a.Spend) // approval denied
	d := g.Decide(req("fetch", http))
	if d.Outcome != OutcomeConfirm || d.Remaining[0].Remaining != 0 || d.Remaining[1].Remaining != 0 {
		t.Fatalf("after refund: %+v", d)
	}
	// Refunds never go below zero, and a refund of an ended window is
	// ignored.
	g.Refund(b.Spend)
	g.Refund(b.Spend)
	g.Refund(b.Spend)
	clock.Advance(time.Hour)
	g.Refund(d.Spend)
	for i := range 2 {
		if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeConfirm {
			t.Fatalf("call %d: %+v", i, d)
		}
	}
	if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeDeny || d.Code != CodeUsageLimit {
		t.Fatalf("%+v", d)
	}
	// Unknown tenants and counters are ignored.
	g.Refund([]Spend{{Tenant: "nobody", Key: "effect:http", Units: 1}, {Tenant: "acme", Key: "effect:gpu", Window: time.Hour, Units: 1}})
}

// TestGuardRestore: a new guard given the persisted spends ("restart")
// reports the same remaining budgets; spends of ended windows are dropped.
func TestGuardRestore(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p := TenantPolicy{
		Budgets: []Budget{
			{Effect: http, Limit: 10, Per: Duration(time.Hour)},
			{Effect: exec, Limit: 10, Per: Duration(time.Minute), Scope: ScopeSession},
		},
		ToolLimits: []ToolLimit{{Tool: "fetch", MaxCalls: 10}},
	}
	g1 := newGuard(t, clock, p)
	var stored []Spend
	old := g1.Decide(req("fetch", http, exec)) // its exec window will have ended
	stored = append(stored, old.Spend...)
	clock.Advance(time.Minute)
	var last Decision
	for range 3 {
		last = g1.Decide(req("fetch", http, exec))
		stored = append(stored, last.Spend...)
	}
	refunded := g1.Decide(req("fetch", http, exec))
	g1.Refund(refunded.Spend) // not persisted as spent
	clock.Advance(10 * time.Second)

	g2 := newGuard(t, clock, p)
	g2.Restore(stored)
	d1 := g1.Decide(req("fetch", http, exec))
	d2 := g2.Decide(req("fetch", http, exec))
	if len(d1.Remaining) != 3 || len(d2.Remaining) != 3 {
		t.Fatalf("%+v\n%+v", d1, d2)
	}
	for i := range d1.Remaining {
		if d1.Remaining[i] != d2.Remaining[i] {
			t.Errorf("remaining[%d]: before restart %+v, after %+v", i, d1.Remaining[i], d2.Remaining[i])
		}
	}
	if got := []int64{d2.Remaining[0].Remaining, d2.Remaining[1].Remaining, d2.Remaining[2].Remaining}; got[0] != 5 || got[1] != 6 || got[2] != 5 {
		t.Errorf("remaining %v, want [5 6 5]", got)
	}

	// A restore of a newer window replaces an older count; unknown tenants
	// are ignored.
	g3 := newGuard(t, clock, p)
	g3.Restore([]Spend{
		{Tenant: "nobody", Key: "effect:http", Window: time.Hour, WindowStart: last.Spend[0].WindowStart, Units: 1},
		{Tenant: "acme", Key: "effect:http", Window: time.Hour, WindowStart: last.Spend[0].WindowStart, Units: 9},
	})
	if d := g3.Decide(req("x", http)); d.Outcome != OutcomeAllow || d.Remaining[0].Remaining != 0 {
		t.Fatalf("%+v", d)
	}
	if d := g3.Decide(req("x", http)); d.Outcome != OutcomeDeny {
		t.Fatalf("%+v", d)
	}
}

// TestGuardRacers: 200 goroutines race for the last 10 units; exactly 10
// get through. Run with -race.
func TestGuardRacers(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{
		Budgets:    []Budget{{Effect: http, Limit: 100, Per: Duration(time.Hour)}, {Effect: exec, Limit: 1000, Per: Duration(time.Hour), Scope: ScopeSession}},
		ToolLimits: []ToolLimit{{Tool: "*", MaxCalls: 1000}},
		RateLimit:  &RateLimit{Rate: 1, Burst: 1000},
	})
	for range 90 {
		if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeAllow {
			t.Fatal(d)
		}
	}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			r := req("fetch", http, exec)
			r.Session = []string{"s1", "s2", "s3", ""}[i%4]
			d := g.Decide(r)
			switch {
			case d.Outcome == OutcomeAllow:
				allowed.Add(1)
			case d.Code == CodeBudgetExhausted && d.Rule == "budgets[0]":
				denied.Add(1)
			default:
				t.Errorf("unexpected %+v", d)
			}
		})
	}
	close(start)
	wg.Wait()
	if allowed.Load() != 10 || denied.Load() != 190 {
		t.Fatalf("allowed %d, denied %d; want 10 and 190", allowed.Load(), denied.Load())
	}
}

// TestGuardPrune: session counters do not grow without bound. Sessions
// whose windows have ended are dropped; those holding tool-limit counts
// stay until ForgetSession.
func TestGuardPrune(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{
		Budgets:    []Budget{{Effect: exec, Limit: 5, Per: Duration(time.Minute), Scope: ScopeSession}},
		ToolLimits: []ToolLimit{{Tool: "limited", MaxCalls: 5}},
	})
	tg := g.tenants["acme"]
	sessions := func() int {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return len(tg.sessions)
	}
	peak := 0
	for round := range 100 {
		for s := range 100 {
			r := req("python", exec)
			r.Session = fmt.Sprintf("round%d-session%d", round, s)
			if d := g.Decide(r); d.Outcome != OutcomeAllow {
				t.Fatal(d)
			}
		}
		peak = max(peak, sessions())
		clock.Advance(30 * time.Second)
	}
	// 100 new sessions per 30s, windows of 1m, pruned every minute: at
	// most ~5 rounds' worth alive at once, not 10,000.
	if peak > 500 {
		t.Fatalf("peak %d session counters", peak)
	}
	clock.Advance(2 * time.Minute)
	g.Decide(req("calc"))
	if n := sessions(); n != 0 {
		t.Fatalf("%d session counters left after every window ended", n)
	}

	// Tool-limit counts never expire: only ForgetSession drops them.
	g.Decide(Request{Tenant: "acme", Session: "keep", Tool: "limited"})
	clock.Advance(time.Hour)
	g.Decide(req("calc"))
	if n := sessions(); n != 1 {
		t.Fatalf("%d session counters, want 1", n)
	}
	g.ForgetSession("acme", "keep")
	g.ForgetSession("nobody", "keep")
	if n := sessions(); n != 0 {
		t.Fatalf("%d session counters after ForgetSession", n)
	}
}

func TestWindowAt(t *testing.T) {
	t.Parallel()
	week := int64(7 * 24 * time.Hour)
	// Epoch-aligned, unlike time.Time.Truncate (aligned to year 1): the
	// Unix epoch was a Thursday, so weekly windows start on Thursdays.
	now := time.Date(2026, 11, 30, 6, 47, 0, 0, time.UTC).UnixNano()
	start, end := windowAt(now, week)
	if s := time.Unix(0, start).UTC(); s.Weekday() != time.Thursday || s.Hour() != 0 || end-start != week || start > now || end <= now {
		t.Errorf("weekly window starts %v", s)
	}
	if start, _ := windowAt(-1, 10); start != -10 {
		t.Errorf("negative: %d", start)
	}
}

// TestGuardClockStepsBack: a wall clock stepping back across a window
// boundary does not reopen the previous window's budget.
func TestGuardClockStepsBack(t *testing.T) {
	t.Parallel()
	clock := newClock()
	g := newGuard(t, clock, TenantPolicy{Budgets: []Budget{{Effect: http, Limit: 1, Per: Duration(time.Hour)}}})
	clock.Advance(time.Hour + time.Second) // 07:00:01
	if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeAllow {
		t.Fatal(d)
	}
	clock.Advance(-2 * time.Second) // 06:59:59
	if d := g.Decide(req("fetch", http)); d.Outcome != OutcomeDeny {
		t.Fatalf("clock stepped back: %+v", d)
	}
}

// TestGuardRefundSessionBudget: refunds and restores of a session budget
// in a policy without tenant budgets.
func TestGuardRefundSessionBudget(t *testing.T) {
	t.Parallel()
	g := newGuard(t, newClock(), TenantPolicy{Budgets: []Budget{{Effect: exec, Limit: 1, Per: Duration(time.Minute), Scope: ScopeSession}}})
	d := g.Decide(req("python", exec))
	if d.Outcome != OutcomeAllow || len(d.Spend) != 1 {
		t.Fatal(d)
	}
	if d := g.Decide(req("python", exec)); d.Outcome != OutcomeDeny {
		t.Fatal(d)
	}
	g.Refund(d.Spend)
	if d := g.Decide(req("python", exec)); d.Outcome != OutcomeAllow {
		t.Fatal(d)
	}
	g.ForgetSession("acme", "s1")
	g.Refund(d.Spend) // session gone: nothing to refund
	g.Restore(d.Spend)
	if d := g.Decide(req("python", exec)); d.Outcome != OutcomeDeny {
		t.Fatalf("restored: %+v", d)
	}
}
