package history

import (
	"math"
	"sort"
	"strconv"
	"time"
)

// MaxPoints bounds the points of a chart: a longer window is read at a
// coarser step (a multiple of the ring's).
const MaxPoints = 240

// Charts are the console's overview over one window.
type Charts struct {
	// Window and Step are in seconds; Step is the time between points.
	WindowSeconds float64 `json:"window_seconds"`
	StepSeconds   float64 `json:"step_seconds"`
	// IntervalSeconds is the sampling period; SampledSince when this
	// process took its first sample (nothing older exists).
	IntervalSeconds float64    `json:"interval_seconds"`
	SampledSince    *time.Time `json:"sampled_since,omitempty"`
	// Times are the points' times (Unix seconds), shared by every chart.
	Times []int64 `json:"times"`
	// DroppedSeries counts series not kept (MaxSeries reached).
	DroppedSeries int     `json:"dropped_series"`
	Charts        []Chart `json:"charts"`
}

// Chart is one time-series chart.
type Chart struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	Unit   string   `json:"unit"`
	Series []Series `json:"series"`
}

// Series is one line; Values are aligned with Charts.Times (null: no
// value at that point, e.g. no job finished for a latency).
type Series struct {
	Name   string  `json:"name"`
	Values []Value `json:"values"`
}

// Value is a point's value; NaN encodes as null.
type Value float64

// MarshalJSON writes NaN and infinities as null.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// Scope selects the series a caller may see: one tenant's (Tenant), or
// every tenant's and the server-wide ones (All).
type Scope struct {
	Tenant string
	All    bool
}

func (sc Scope) sees(k key) bool {
	if sc.All {
		return true
	}
	return k.tenant != "" && k.tenant == sc.Tenant
}

// Query returns the charts over the last window (at most 24 h at the
// default interval; a longer one returns what the coarse ring holds).
func (h *History) Query(window time.Duration, sc Scope) Charts {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.opts.Now()
	// The fine ring while it covers the window, or still holds every
	// sample taken; the coarse one for longer windows.
	ring := &h.fine
	if window > h.opts.Interval*time.Duration(FineSamples) && h.fine.full {
		ring = &h.coarse
	}
	samples := ring.since(now.Add(-window))
	// One sample before the window too, so the first point has a rate.
	if all := ring.since(time.Time{}); len(all) > len(samples) {
		samples = append([]sample{all[len(all)-len(samples)-1]}, samples...)
	}
	out := Charts{WindowSeconds: window.Seconds(), IntervalSeconds: h.opts.Interval.Seconds(), Times: []int64{}}
	if h.n > 0 {
		t := h.started.UTC()
		out.SampledSince = &t
	}
	out.DroppedSeries = len(h.dropped)
	// Points: anchored at the newest sample, every step-th sample back.
	step := 1
	if len(samples) > MaxPoints+1 {
		step = (len(samples) - 1 + MaxPoints - 1) / MaxPoints
	}
	var pts []sample
	for i := len(samples) - 1; i >= 0; i -= step {
		pts = append(pts, samples[i])
	}
	for i, j := 0, len(pts)-1; i < j; i, j = i+1, j-1 {
		pts[i], pts[j] = pts[j], pts[i]
	}
	ringStep := h.opts.Interval
	if ring == &h.coarse {
		ringStep *= CoarseEvery
	}
	out.StepSeconds = (ringStep * time.Duration(step)).Seconds()
	for _, p := range pts[min(1, len(pts)):] {
		out.Times = append(out.Times, p.t.Unix())
	}
	q := query{h: h, sc: sc, pts: pts}
	out.Charts = []Chart{
		{ID: "jobs", Title: "Jobs per second by outcome", Unit: "/s",
			Series: q.rates("sandboxd_jobs_total", func(k key) string { return k.label })},
		{ID: "latency", Title: "Latency by tool (p50, p90, p99)", Unit: "s", Series: q.latency()},
		{ID: "effects", Title: "Effects spent per second by tenant", Unit: "/s",
			Series: q.rates("sandboxd_effects_spent_total", func(k key) string { return k.tenant + " " + k.label })},
		{ID: "guard", Title: "Guard decisions per second by outcome", Unit: "/s",
			Series: q.rates("sandboxd_guard_decisions_total", func(k key) string { return k.label })},
		{ID: "egress", Title: "Egress requests per second", Unit: "/s",
			Series: q.rates("sandboxd_egress_requests_total", func(k key) string { return k.label })},
		{ID: "sandboxes", Title: "Sandboxes, pool, queue and sessions", Unit: "",
			Series: q.gauges([][2]string{
				{"sandboxd_sandboxes_alive", "sandboxes alive"},
				{"sandboxd_pool_ready", "pool ready"},
				{"sandboxd_queue_depth", "queue depth"},
				{"sandboxd_jobs_in_flight", "jobs in flight"},
				{"sandboxd_sessions_active", "sessions active"},
				{"sandboxd_approvals_pending", "approvals pending"},
			})},
	}
	return out
}

type query struct {
	h   *History
	sc  Scope
	pts []sample
}

func at(s sample, i int) float64 {
	if i < len(s.v) {
		return s.v[i]
	}
	return math.NaN()
}

// groups returns the visible series of metric grouped by name, names sorted.
func (q query) groups(metric string, name func(key) string, keep func(key) bool) ([]string, map[string][]int) {
	g := map[string][]int{}
	for i, k := range q.h.keys {
		if k.metric != metric || !q.sc.sees(k) || (keep != nil && !keep(k)) {
			continue
		}
		n := name(k)
		g[n] = append(g[n], i)
	}
	names := make([]string, 0, len(g))
	for n := range g {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, g
}

// delta is a counter's increase from a to b (a reset: b itself); ok is
// false when b has no value.
func delta(a, b sample, i int) (float64, bool) {
	vb := at(b, i)
	if math.IsNaN(vb) {
		return 0, false
	}
	va := at(a, i)
	if math.IsNaN(va) {
		va = 0 // born between the samples: counters start at 0
	}
	if vb < va {
		return vb, true
	}
	return vb - va, true
}

func (q query) rates(metric string, name func(key) string) []Series {
	names, g := q.groups(metric, name, func(k key) bool { return !k.bucket && !k.count })
	out := []Series{}
	for _, n := range names {
		s := Series{Name: n, Values: make([]Value, 0, len(q.pts))}
		for p := 1; p < len(q.pts); p++ {
			a, b := q.pts[p-1], q.pts[p]
			dt := b.t.Sub(a.t).Seconds()
			sum, any := 0.0, false
			for _, i := range g[n] {
				if d, ok := delta(a, b, i); ok {
					sum, any = sum+d, true
				}
			}
			if !any || dt <= 0 {
				s.Values = append(s.Values, Value(math.NaN()))
				continue
			}
			s.Values = append(s.Values, Value(sum/dt))
		}
		out = append(out, s)
	}
	return out
}

func (q query) gauges(metrics [][2]string) []Series {
	out := []Series{}
	for _, m := range metrics {
		names, g := q.groups(m[0], func(key) string { return m[1] }, nil)
		if len(names) == 0 {
			continue
		}
		s := Series{Name: m[1], Values: make([]Value, 0, len(q.pts))}
		for p := 1; p < len(q.pts); p++ {
			sum, any := 0.0, false
			for _, i := range g[m[1]] {
				if v := at(q.pts[p], i); !math.IsNaN(v) {
					sum, any = sum+v, true
				}
			}
			if !any {
				sum = math.NaN()
			}
			s.Values = append(s.Values, Value(sum))
		}
		out = append(out, s)
	}
	return out
}

// Quantiles the latency chart draws.
var Quantiles = []struct {
	Q    float64
	Name string
}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}}

func (q query) latency() []Series {
	tools, g := q.groups("sandboxd_job_duration_seconds", func(k key) string { return k.label },
		func(k key) bool { return k.bucket })
	out := []Series{}
	for _, tool := range tools {
		per := make([][]Value, len(Quantiles))
		for p := 1; p < len(q.pts); p++ {
			a, b := q.pts[p-1], q.pts[p]
			byLE := map[float64]float64{}
			for _, i := range g[tool] {
				if d, ok := delta(a, b, i); ok {
					byLE[q.h.keys[i].le] += d
				}
			}
			bs := make([]Bucket, 0, len(byLE))
			for le, c := range byLE {
				bs = append(bs, Bucket{UpperBound: le, Count: c})
			}
			sort.Slice(bs, func(i, j int) bool { return bs[i].UpperBound < bs[j].UpperBound })
			for qi, qq := range Quantiles {
				per[qi] = append(per[qi], Value(Quantile(qq.Q, bs)))
			}
		}
		for qi, qq := range Quantiles {
			out = append(out, Series{Name: tool + " " + qq.Name, Values: per[qi]})
		}
	}
	return out
}

// Bucket is a cumulative histogram bucket.
type Bucket struct {
	UpperBound, Count float64
}

// Quantile is PromQL's histogram_quantile over cumulative buckets sorted
// by bound, the last +Inf: linear interpolation inside the bucket the
// rank falls in (from 0 for the first), the highest finite bound when it
// falls in +Inf; NaN without observations.
func Quantile(q float64, bs []Bucket) float64 {
	if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].UpperBound, 1) {
		return math.NaN()
	}
	total := bs[len(bs)-1].Count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	for i, b := range bs {
		if b.Count < rank {
			continue
		}
		if math.IsInf(b.UpperBound, 1) {
			if i == 0 {
				return math.NaN()
			}
			return bs[i-1].UpperBound
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = bs[i-1].UpperBound, bs[i-1].Count
		}
		if b.Count == below {
			return b.UpperBound
		}
		return lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below)
	}
	return bs[len(bs)-1].UpperBound
}
