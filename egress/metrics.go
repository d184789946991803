package egress

import "github.com/prometheus/client_golang/prometheus"

// metrics are the proxy's Prometheus counters.
type metrics struct {
	requests *prometheus.CounterVec // tenant, decision
	bytes    *prometheus.CounterVec // tenant, direction
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_egress_requests_total",
			Help: "Requests and CONNECT tunnels sandboxes asked the egress proxy for, by tenant and decision (allowed, denied).",
		}, []string{"tenant", "decision"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_egress_bytes_total",
			Help: "Bytes the egress proxy exchanged with origins on behalf of sandboxes, by tenant and direction (out: to the origin, in: from it).",
		}, []string{"tenant", "direction"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.bytes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// record counts an event: bytes first, so a reader that sees the request
// counted also sees its bytes.
func (m *metrics) record(ev *Event) {
	decision := "denied"
	if ev.Allowed {
		decision = "allowed"
	}
	if ev.BytesOut > 0 {
		m.bytes.WithLabelValues(ev.Tenant, "out").Add(float64(ev.BytesOut))
	}
	if ev.BytesIn > 0 {
		m.bytes.WithLabelValues(ev.Tenant, "in").Add(float64(ev.BytesIn))
	}
	m.requests.WithLabelValues(ev.Tenant, decision).Inc()
}
