package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestGuardMetrics(t *testing.T) {
	t.Parallel()
	clock := newClock()
	reg := prometheus.NewPedanticRegistry()
	g, err := NewGuard(map[string]TenantPolicy{
		"acme": {
			Rules: []Rule{{Tool: "shell", Action: ActionDeny}, {Effect: fwrit, Action: ActionConfirm}},
			Budgets: []Budget{
				{Effect: http, Limit: 2, Per: Duration(time.Hour)},
				{Effect: exec, Limit: 5, Per: Duration(time.Hour), Scope: ScopeSession}, // not exported
			},
		},
		"quiet": {}, // disabled: exports nothing
	}, GuardOptions{Now: clock.Now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sandboxd_guard_budget_limit Calls a tenant-scoped effect budget allows per window.
# TYPE sandboxd_guard_budget_limit gauge
sandboxd_guard_budget_limit{effect="http",rule="budgets[0]",scope="tenant",tenant="acme"} 2
# HELP sandboxd_guard_budget_remaining Calls a tenant-scoped effect budget still allows in its current window.
# TYPE sandboxd_guard_budget_remaining gauge
sandboxd_guard_budget_remaining{effect="http",rule="budgets[0]",scope="tenant",tenant="acme"} 2
`)); err != nil {
		t.Fatalf("fresh guard: %v", err)
	}

	g.Decide(req("shell"))
	g.Decide(req("fetch", http))
	g.Decide(req("fetch", http))
	g.Decide(req("fetch", http))
	g.Decide(req("edit", fwrit))
	g.Decide(req("calc"))
	g.Decide(Request{Tenant: "quiet", Tool: "x"})

	want := `
# HELP sandboxd_guard_budget_limit Calls a tenant-scoped effect budget allows per window.
# TYPE sandboxd_guard_budget_limit gauge
sandboxd_guard_budget_limit{effect="http",rule="budgets[0]",scope="tenant",tenant="acme"} 2
# HELP sandboxd_guard_budget_remaining Calls a tenant-scoped effect budget still allows in its current window.
# TYPE sandboxd_guard_budget_remaining gauge
sandboxd_guard_budget_remaining{effect="http",rule="budgets[0]",scope="tenant",tenant="acme"} %s
# HELP sandboxd_guard_decisions_total Guard decisions on tool calls, by tenant, outcome (allow, deny, confirm) and the policy part that decided (rules[i], default, rate_limit, budgets[i], tool_limits[i]).
# TYPE sandboxd_guard_decisions_total counter
sandboxd_guard_decisions_total{outcome="allow",rule="default",tenant="acme"} 3
sandboxd_guard_decisions_total{outcome="confirm",rule="rules[1]",tenant="acme"} 1
sandboxd_guard_decisions_total{outcome="deny",rule="budgets[0]",tenant="acme"} 1
sandboxd_guard_decisions_total{outcome="deny",rule="rules[0]",tenant="acme"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, "%s", "0", 1))); err != nil {
		t.Fatal(err)
	}
	// The gauge follows the window without any decision.
	clock.Advance(time.Hour)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, "%s", "2", 1))); err != nil {
		t.Fatalf("next window: %v", err)
	}

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// A second guard on the same registry is an error, not a panic.
	if _, err := NewGuard(map[string]TenantPolicy{"acme": {}}, GuardOptions{Registerer: reg}); err == nil {
		t.Error("registered twice without an error")
	}
}

// On a shared store the guard's counts are the store's: Observe sets the
// tenant's window as reported, and the gauge shows it.
func TestGuardMetricsObserve(t *testing.T) {
	t.Parallel()
	clock := newClock()
	reg := prometheus.NewPedanticRegistry()
	g, err := NewGuard(map[string]TenantPolicy{
		"acme": {Budgets: []Budget{{Effect: http, Limit: 10, Per: Duration(time.Hour)}}},
	}, GuardOptions{Now: clock.Now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	plan := g.Plan(req("fetch", http))
	if len(plan.Spend) != 1 {
		t.Fatalf("plan %+v", plan)
	}
	remaining := func(n string) string {
		return `
# HELP sandboxd_guard_budget_remaining Calls a tenant-scoped effect budget still allows in its current window.
# TYPE sandboxd_guard_budget_remaining gauge
sandboxd_guard_budget_remaining{effect="http",rule="budgets[0]",scope="tenant",tenant="acme"} ` + n + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(remaining("10")), "sandboxd_guard_budget_remaining"); err != nil {
		t.Fatalf("a plan spends nothing: %v", err)
	}
	g.Observe(plan.Spend, []int64{7}) // another replica's spends counted too
	if err := testutil.GatherAndCompare(reg, strings.NewReader(remaining("3")), "sandboxd_guard_budget_remaining"); err != nil {
		t.Fatalf("observed 7: %v", err)
	}
	g.Observe(plan.Spend, []int64{-1}) // no counter: ignored
	g.Observe(plan.Spend, []int64{6})  // a refund
	if err := testutil.GatherAndCompare(reg, strings.NewReader(remaining("4")), "sandboxd_guard_budget_remaining"); err != nil {
		t.Fatalf("observed 6: %v", err)
	}
}
