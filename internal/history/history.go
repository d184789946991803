// Package history keeps the console's overview charts: every Interval it
// gathers sandboxd's own metrics (the registry /metrics serves) and keeps
// the few series the charts need in two bounded rings in memory, a fine
// one (the last FineSamples samples: 1 h at 5 s) and a coarse one (one
// sample in CoarseEvery, CoarseSamples of them: 24 h at 5 s), so that the
// built-in console shows the last 5 minutes to 24 hours without
// Prometheus. Each sandboxd process keeps its own (a replica's charts are
// that replica's), and nothing is persisted: a restart starts empty.
//
// A series is one metric reduced to the labels the charts need (the
// tenant and one more: outcome, tool, effect, decision) with the other
// labels summed; histograms keep their cumulative buckets. Query derives
// the charts for a window at query time: rates from counter deltas
// (a decrease is a counter reset), latency quantiles from bucket deltas
// (as PromQL's histogram_quantile), gauges as sampled. Scoped to a tenant,
// Query uses only that tenant's series and leaves out the server-wide
// gauges (queue, sandboxes, pool), which are the operator's.
package history

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ring sizes.
const (
	FineSamples   = 720
	CoarseSamples = 1440
	CoarseEvery   = 12
)

// Options configure a History. Zero fields take the defaults.
type Options struct {
	// Interval is the sampling period (default 5s).
	Interval time.Duration
	// MaxSeries bounds the series kept (default 1000); samples of series
	// past it are dropped and counted (Dropped).
	MaxSeries int
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// History is the console's in-memory metrics history. Safe for concurrent
// use.
type History struct {
	g    prometheus.Gatherer
	opts Options

	mu      sync.Mutex
	index   map[key]int
	keys    []key
	dropped map[key]bool
	fine    ring
	coarse  ring
	n       int // samples taken
	started time.Time
}

// key names a series: a metric reduced to the tenant and one more label;
// le is a histogram bucket's bound (+Inf included) when bucket is set.
// (No NaN in a map key: NaN != NaN.)
type key struct {
	metric, tenant, label string
	bucket                bool
	le                    float64
	count                 bool // a histogram's _count
}

type sample struct {
	t time.Time
	v []float64 // by series index; shorter than keys: NaN beyond
}

type ring struct {
	buf  []sample
	next int
	full bool
}

func newRing(n int) ring { return ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// since returns the samples at or after t, oldest first.
func (r *ring) since(t time.Time) []sample {
	var out []sample
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	for i := range n {
		j := i
		if r.full {
			j = (r.next + i) % len(r.buf)
		}
		if s := r.buf[j]; !s.t.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// tracked is how a metric is reduced: the second label kept besides tenant.
var tracked = map[string]string{
	"sandboxd_jobs_total":            "outcome",
	"sandboxd_job_duration_seconds":  "tool",
	"sandboxd_effects_spent_total":   "effect",
	"sandboxd_guard_decisions_total": "outcome",
	"sandboxd_egress_requests_total": "decision",
	"sandboxd_sessions_active":       "",
	"sandboxd_approvals_pending":     "",
	"sandboxd_sandboxes_alive":       "",
	"sandboxd_pool_ready":            "",
	"sandboxd_queue_depth":           "",
	"sandboxd_jobs_in_flight":        "",
}

// New returns a History of g's metrics; call Run (or Sample) to fill it.
func New(g prometheus.Gatherer, o Options) *History {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &History{g: g, opts: o, index: map[key]int{}, dropped: map[key]bool{},
		fine: newRing(FineSamples), coarse: newRing(CoarseSamples)}
}

// Interval is the sampling period.
func (h *History) Interval() time.Duration { return h.opts.Interval }

// Run samples every Interval until ctx ends.
func (h *History) Run(ctx context.Context) {
	h.Sample()
	t := time.NewTicker(h.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.Sample()
		}
	}
}

// Sample gathers the metrics once and records them.
func (h *History) Sample() {
	fams, _ := h.g.Gather() // a partial gather still has what it has
	now := h.opts.Now()
	vals := map[key]float64{}
	for _, f := range fams {
		second, ok := tracked[f.GetName()]
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			k := key{metric: f.GetName()}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant":
					k.tenant = l.GetValue()
				case second:
					k.label = l.GetValue()
				}
			}
			switch {
			case m.GetHistogram() != nil:
				hist := m.GetHistogram()
				for _, b := range hist.GetBucket() {
					bk := k
					bk.bucket, bk.le = true, b.GetUpperBound()
					vals[bk] += float64(b.GetCumulativeCount())
				}
				inf := k
				inf.bucket, inf.le = true, math.Inf(1)
				vals[inf] += float64(hist.GetSampleCount())
				ck := k
				ck.count = true
				vals[ck] += float64(hist.GetSampleCount())
			case m.GetCounter() != nil:
				vals[k] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				vals[k] += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				vals[k] += m.GetUntyped().GetValue()
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// New series in a stable order, so that a run's indexes do not depend
	// on map iteration.
	var fresh []key
	for k := range vals {
		if _, ok := h.index[k]; !ok && !h.dropped[k] {
			fresh = append(fresh, k)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return less(fresh[i], fresh[j]) })
	for _, k := range fresh {
		if len(h.keys) >= h.opts.MaxSeries {
			h.dropped[k] = true
			continue
		}
		h.index[k] = len(h.keys)
		h.keys = append(h.keys, k)
	}
	s := sample{t: now, v: make([]float64, len(h.keys))}
	for i := range s.v {
		s.v[i] = math.NaN()
	}
	for k, v := range vals {
		if i, ok := h.index[k]; ok {
			s.v[i] = v
		}
	}
	if h.n == 0 {
		h.started = now
	}
	h.fine.add(s)
	if h.n%CoarseEvery == 0 {
		h.coarse.add(s)
	}
	h.n++
}

func less(a, b key) bool {
	if a.metric != b.metric {
		return a.metric < b.metric
	}
	if a.tenant != b.tenant {
		return a.tenant < b.tenant
	}
	if a.label != b.label {
		return a.label < b.label
	}
	if a.count != b.count {
		return !a.count
	}
	if a.bucket != b.bucket {
		return !a.bucket
	}
	return a.le < b.le
}
