package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/history"
)

// GET /v1/dashboard/series: the charts of the process's history, scoped
// like /v1/dashboard (a tenant's series only; the operator's server-wide
// gauges too), a window from 5m to 24h, and the answer the OpenAPI
// document describes (the harness checks every answer against it).
func TestDashboardSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_jobs_total"}, []string{"tenant", "tool", "runner", "outcome"})
	alive := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxd_sandboxes_alive"})
	reg.MustRegister(jobs, alive)
	now := time.Now()
	hist := history.New(reg, history.Options{Interval: time.Second, Now: func() time.Time { return now }})
	hist.Sample()
	jobs.WithLabelValues("a", "bash", "local", "ok").Add(4)
	jobs.WithLabelValues("b", "bash", "local", "ok").Add(2)
	alive.Set(2)
	now = now.Add(2 * time.Second)
	hist.Sample()

	h := newHarness(t, Options{Keys: map[string]string{"key-a": "a", "key-b": "b"}, OperatorKeys: []string{"key-op"},
		History: hist, Replica: "r1"})
	get := func(key, query string) (int, seriesView) {
		rec := h.do("GET", "/v1/dashboard/series"+query, "", "X-API-Key: "+key)
		var v seriesView
		if rec.Code == 200 {
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, v
	}
	value := func(v seriesView, chart, series string) (float64, bool) {
		for _, c := range v.Charts.Charts {
			for _, s := range c.Series {
				if c.ID == chart && s.Name == series && len(s.Values) > 0 {
					return float64(s.Values[len(s.Values)-1]), true
				}
			}
		}
		return 0, false
	}
	code, a := get("key-a", "")
	if code != 200 || a.Replica != "r1" || a.Scope != "tenant a" || a.WindowSeconds != 3600 {
		t.Fatalf("tenant a: %d %+v", code, a)
	}
	if v, _ := value(a, "jobs", "ok"); v != 2 { // 4 jobs in 2 s, b's not counted
		t.Errorf("a's ok rate %v, want 2", v)
	}
	if _, ok := value(a, "sandboxes", "sandboxes alive"); ok {
		t.Error("a tenant sees the server-wide sandboxes")
	}
	_, op := get("key-op", "?window=5m")
	if v, _ := value(op, "jobs", "ok"); v != 3 || op.WindowSeconds != 300 {
		t.Errorf("operator ok rate %v over %v s, want 3 over 300", v, op.WindowSeconds)
	}
	if v, ok := value(op, "sandboxes", "sandboxes alive"); !ok || v != 2 {
		t.Errorf("operator sandboxes alive %v %v", v, ok)
	}
	for _, q := range []string{"?window=1m", "?window=25h", "?window=soon"} {
		if code, _ := get("key-a", q); code != 400 {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
	if rec := h.do("GET", "/v1/dashboard/series", ""); rec.Code != 401 {
		t.Errorf("without a key: %d, want 401", rec.Code)
	}
}
