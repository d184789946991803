package api

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the API's own metrics, labelled by chi route pattern.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// forwards counts requests between replicas (forward.go): sent
	// (answered by the owner), unreachable (the owner did not answer),
	// received (accepted here), refused (a bad envelope).
	forwards *prometheus.CounterVec
}

func newHTTPMetrics(reg prometheus.Registerer, log *slog.Logger) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "HTTP request duration by method and route pattern (SSE streams and waits included).",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 300},
		}, []string{"method", "route"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "replica", Name: "forwards_total",
			Help: "Requests forwarded between replicas: sent (answered by the owner), unreachable (the owner did not answer), received (accepted here), refused (a forged, replayed or stale envelope).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m
	}
	m.requests = register(reg, m.requests, log)
	m.duration = register(reg, m.duration, log)
	m.forwards = register(reg, m.forwards, log)
	return m
}

// register registers c, reusing an identical collector that is already
// registered (a second handler on the same registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		log.Warn("api metrics not registered", "err", err)
	}
	return c
}

func (m *httpMetrics) observe(method, route string, code int, d time.Duration) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
	default:
		method = "OTHER" // bound label cardinality
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(method, route).Observe(d.Seconds())
}
