package policy

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// benchPolicy has a few rules, budgets of both scopes, tool limits and a
// rate limit, all large enough never to deny.
func benchPolicy() TenantPolicy {
	return TenantPolicy{
		Rules: []Rule{
			{Tool: "shell", Action: ActionDeny},
			{Tool: "file_*", Effect: tools.EffectFileWrite, Action: ActionConfirm},
			{Tool: "admin_*", Action: ActionDeny},
			{Effect: tools.EffectHTTP, Action: ActionAllow},
		},
		Budgets: []Budget{
			{Effect: tools.EffectExec, Limit: math.MaxInt64 / 2, Per: Duration(time.Hour)},
			{Effect: tools.EffectHTTP, Limit: math.MaxInt64 / 2, Per: Duration(time.Minute), Scope: ScopeSession},
		},
		ToolLimits: []ToolLimit{{Tool: "python_repl", MaxCalls: math.MaxInt64 / 2}},
		RateLimit:  &RateLimit{Rate: 1e12, Burst: math.MaxInt32},
	}
}

var benchDecision Decision

// BenchmarkGuardDecide: one allowed call that passes rules, the rate
// limit, two budgets and a tool limit (three reservations). The baseline,
// BenchmarkGuardDisabled, is a tenant without a policy.
func BenchmarkGuardDecide(b *testing.B) {
	g, err := NewGuard(map[string]TenantPolicy{"acme": benchPolicy()}, GuardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := Request{Tenant: "acme", Session: "s1", Tool: "python_repl", Effects: []tools.Effect{tools.EffectExec, tools.EffectHTTP}}
	b.ReportAllocs()
	for b.Loop() {
		benchDecision = g.Decide(r)
	}
	if benchDecision.Outcome != OutcomeAllow || len(benchDecision.Spend) != 3 {
		b.Fatalf("%+v", benchDecision)
	}
}

// BenchmarkGuardDecideDeny: denied by a rule (nothing reserved).
func BenchmarkGuardDecideDeny(b *testing.B) {
	g, err := NewGuard(map[string]TenantPolicy{"acme": benchPolicy()}, GuardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := Request{Tenant: "acme", Session: "s1", Tool: "admin_reset"}
	b.ReportAllocs()
	for b.Loop() {
		benchDecision = g.Decide(r)
	}
	if benchDecision.Outcome != OutcomeDeny {
		b.Fatalf("%+v", benchDecision)
	}
}

// BenchmarkGuardDecideParallel: every goroutine in the same tenant, each in
// its own session (the tenant's lock is the contention point).
func BenchmarkGuardDecideParallel(b *testing.B) {
	g, err := NewGuard(map[string]TenantPolicy{"acme": benchPolicy()}, GuardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		r := Request{Tenant: "acme", Session: fmt.Sprint("s", n.Add(1)), Tool: "python_repl", Effects: []tools.Effect{tools.EffectExec}}
		for pb.Next() {
			g.Decide(r)
		}
	})
}

func BenchmarkGuardDisabled(b *testing.B) {
	g, err := NewGuard(map[string]TenantPolicy{"acme": benchPolicy(), "free": {}}, GuardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := Request{Tenant: "free", Session: "s1", Tool: "python_repl", Effects: []tools.Effect{tools.EffectExec, tools.EffectHTTP}}
	b.ReportAllocs()
	for b.Loop() {
		benchDecision = g.Decide(r)
	}
}
