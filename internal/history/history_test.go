package history

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func setup(t *testing.T) (*History, *clock, *prometheus.CounterVec, *prometheus.HistogramVec, prometheus.Gauge) {
	t.Helper()
	reg := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_jobs_total"}, []string{"tenant", "tool", "runner", "outcome"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandboxd_job_duration_seconds", Buckets: []float64{0.1, 1, 10}},
		[]string{"tenant", "tool", "runner"})
	alive := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxd_sandboxes_alive"})
	reg.MustRegister(jobs, dur, alive)
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	return New(reg, Options{Interval: 5 * time.Second, Now: c.now}), c, jobs, dur, alive
}

func chart(cs Charts, id string) Chart {
	for _, c := range cs.Charts {
		if c.ID == id {
			return c
		}
	}
	return Chart{}
}

func series(c Chart, name string) []Value {
	for _, s := range c.Series {
		if s.Name == name {
			return s.Values
		}
	}
	return nil
}

func TestRatesQuantilesAndScope(t *testing.T) {
	t.Parallel()
	h, c, jobs, dur, alive := setup(t)
	h.Sample() // t0: nothing yet
	c.t = c.t.Add(5 * time.Second)
	jobs.WithLabelValues("alice", "bash", "local", "ok").Add(10)
	jobs.WithLabelValues("bob", "bash", "local", "ok").Add(5)
	jobs.WithLabelValues("alice", "calc", "inprocess", "tool_error").Add(5)
	for range 9 {
		dur.WithLabelValues("alice", "bash", "local").Observe(0.05)
	}
	dur.WithLabelValues("alice", "bash", "local").Observe(5)
	alive.Set(3)
	h.Sample() // t1
	c.t = c.t.Add(5 * time.Second)
	jobs.Reset() // a restart of the counters: the new value counts
	jobs.WithLabelValues("alice", "bash", "local", "ok").Add(2)
	h.Sample() // t2

	op := h.Query(time.Hour, Scope{All: true})
	if len(op.Times) != 2 || op.StepSeconds != 5 {
		t.Fatalf("times %v step %v, want 2 points 5 s apart", op.Times, op.StepSeconds)
	}
	ok := series(chart(op, "jobs"), "ok")
	if len(ok) != 2 || ok[0] != 3 || ok[1] != 0.4 { // (10+5)/5 s; after the reset 2/5 s
		t.Errorf("operator ok rate %v, want [3 0.4]", ok)
	}
	if te := series(chart(op, "jobs"), "tool_error"); te[0] != 1 || !math.IsNaN(float64(te[1])) {
		t.Errorf("tool_error %v, want [1 null] (the series went away)", te)
	}
	al := series(chart(op, "sandboxes"), "sandboxes alive")
	if al[0] != 3 {
		t.Errorf("sandboxes alive %v", al)
	}
	p50 := series(chart(op, "latency"), "bash p50")
	p99 := series(chart(op, "latency"), "bash p99")
	if math.Abs(float64(p50[0])-0.0556) > 0.001 || p99[0] <= 1 || !math.IsNaN(float64(p50[1])) {
		t.Errorf("bash p50 %v p99 %v", p50, p99)
	}

	bob := h.Query(time.Hour, Scope{Tenant: "bob"})
	if s := series(chart(bob, "jobs"), "ok"); s[0] != 1 {
		t.Errorf("bob's ok rate %v, want 5/5 s = 1 (alice's not counted)", s)
	}
	if len(chart(bob, "sandboxes").Series) != 0 || len(chart(bob, "latency").Series) != 0 {
		t.Errorf("bob sees server-wide gauges or alice's latency: %+v", bob.Charts)
	}
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("invalid JSON %s", b)
	}
}

// The rings stay bounded, a long window reads the coarse ring, and a
// window never yields more than MaxPoints points.
func TestRingsBounded(t *testing.T) {
	t.Parallel()
	h, c, jobs, _, _ := setup(t)
	for range FineSamples * 3 {
		jobs.WithLabelValues("a", "x", "r", "ok").Inc()
		h.Sample()
		c.t = c.t.Add(5 * time.Second)
	}
	if n := len(h.fine.since(time.Time{})); n != FineSamples {
		t.Errorf("fine ring holds %d, want %d", n, FineSamples)
	}
	if n := len(h.coarse.since(time.Time{})); n != FineSamples*3/CoarseEvery {
		t.Errorf("coarse ring holds %d, want %d", n, FineSamples*3/CoarseEvery)
	}
	short := h.Query(5*time.Minute, Scope{All: true})
	if len(short.Times) != 60 || short.StepSeconds != 5 {
		t.Errorf("5 min: %d points every %v s, want 60 every 5", len(short.Times), short.StepSeconds)
	}
	day := h.Query(24*time.Hour, Scope{All: true})
	if len(day.Times) > MaxPoints || day.StepSeconds < 60 {
		t.Errorf("24 h: %d points every %v s", len(day.Times), day.StepSeconds)
	}
	for _, v := range series(chart(day, "jobs"), "ok") {
		if math.Abs(float64(v)-0.2) > 1e-9 { // one job per 5 s sample
			t.Fatalf("24 h rate %v, want 0.2", v)
		}
	}
}

func TestMaxSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_jobs_total"}, []string{"tenant", "outcome"})
	reg.MustRegister(jobs)
	h := New(reg, Options{MaxSeries: 3})
	for i := range 5 {
		jobs.WithLabelValues(string(rune('a'+i)), "ok").Inc()
	}
	h.Sample()
	if len(h.keys) != 3 || h.Query(time.Hour, Scope{All: true}).DroppedSeries != 2 {
		t.Errorf("%d series kept, want 3 and 2 dropped", len(h.keys))
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	bs := []Bucket{{0.1, 1}, {1, 3}, {math.Inf(1), 4}}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.55}, {0.25, 0.1}, {0.99, 1}} {
		if got := Quantile(tc.q, bs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if !math.IsNaN(Quantile(0.5, []Bucket{{1, 0}, {math.Inf(1), 0}})) {
		t.Error("no observations: want NaN")
	}
}
