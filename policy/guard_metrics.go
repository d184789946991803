package policy

import "github.com/prometheus/client_golang/prometheus"

var (
	guardDecisionsDesc = prometheus.NewDesc(
		"sandboxd_guard_decisions_total",
		"Guard decisions on tool calls, by tenant, outcome (allow, deny, confirm) and the policy part that decided (rules[i], default, rate_limit, budgets[i], tool_limits[i]).",
		[]string{"tenant", "outcome", "rule"}, nil)
	guardBudgetRemainingDesc = prometheus.NewDesc(
		"sandboxd_guard_budget_remaining",
		"Calls a tenant-scoped effect budget still allows in its current window.",
		[]string{"tenant", "rule", "effect", "scope"}, nil)
	guardBudgetLimitDesc = prometheus.NewDesc(
		"sandboxd_guard_budget_limit",
		"Calls a tenant-scoped effect budget allows per window.",
		[]string{"tenant", "rule", "effect", "scope"}, nil)
)

// guardCollector exports the guard's own counters; it reads them under
// each tenant's lock and never feeds anything back.
type guardCollector struct{ g *Guard }

var _ prometheus.Collector = (*guardCollector)(nil)

func (c *guardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- guardDecisionsDesc
	ch <- guardBudgetRemainingDesc
	ch <- guardBudgetLimitDesc
}

// Collect emits the decision counters that have counted something and,
// for every tenant-scoped budget, its limit and what remains of the
// current window (per-session budgets are left out: one series per
// session would explode cardinality).
func (c *guardCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.g.now().UnixNano()
	var decisions []uint64
	var remaining []int64
	for _, t := range c.g.tenants {
		if !t.enabled {
			continue
		}
		// Copy under the lock, send after it: a slow scrape must not
		// hold up Decide.
		t.mu.Lock()
		now := max(now, t.seen)
		decisions = append(decisions[:0], t.decisions...)
		remaining = remaining[:0]
		for i := range t.budgets {
			b := &t.budgets[i]
			left := b.limit
			if !b.session {
				start, _ := windowAt(now, b.per)
				if w := t.tenantWin[b.slot]; w.start == start {
					left = max(0, b.limit-w.used)
				}
			}
			remaining = append(remaining, left)
		}
		t.mu.Unlock()

		for i, n := range decisions {
			if n == 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(guardDecisionsDesc, prometheus.CounterValue, float64(n),
				t.name, string(outcomeByIndex[i%numOutcomes]), t.labels[i/numOutcomes])
		}
		for i := range t.budgets {
			b := &t.budgets[i]
			if b.session {
				continue
			}
			labels := []string{t.name, t.labels[b.label], string(b.effect), ScopeTenant}
			ch <- prometheus.MustNewConstMetric(guardBudgetRemainingDesc, prometheus.GaugeValue, float64(remaining[i]), labels...)
			ch <- prometheus.MustNewConstMetric(guardBudgetLimitDesc, prometheus.GaugeValue, float64(b.limit), labels...)
		}
	}
}
