package api

import (
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// dashboardData serves GET /v1/dashboard: the numbers of the built-in
// dashboard, in the Prometheus text format of the metrics listener, scoped
// to the caller. A tenant gets only the samples labelled with its own
// tenant (its jobs, latencies, effects, guard budgets and decisions,
// pending approvals, sessions, egress); server-wide numbers without a
// tenant label (queue, sandboxes, pool, HTTP) are the operator's, who gets
// every sandboxd_* sample of every tenant.
func (s *server) dashboardData(w http.ResponseWriter, r *http.Request) {
	fams, err := s.opts.Dashboard.Gather()
	if err != nil && len(fams) == 0 {
		s.writeError(w, r, err)
		return
	}
	who := principalFrom(r.Context())
	scope := "operator"
	if !who.operator {
		scope = "tenant " + who.tenant
		fams = scopeToTenant(fams, who.tenant)
	}
	h := w.Header()
	h.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Sandboxd-Scope", scope)
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "sandboxd_") {
			if err := enc.Encode(f); err != nil {
				logger(r.Context(), s.log).Warn("dashboard data", "err", err)
				return
			}
		}
	}
}

// scopeToTenant keeps the samples whose tenant label is tenant, and the
// families that keep any.
func scopeToTenant(fams []*dto.MetricFamily, tenant string) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, f := range fams {
		var keep []*dto.Metric
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					keep = append(keep, m)
					break
				}
			}
		}
		if len(keep) > 0 {
			out = append(out, &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit, Metric: keep})
		}
	}
	return out
}
