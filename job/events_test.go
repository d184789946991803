package job_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/job"
)

func equalTypes(a, b []job.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func collect(t *testing.T, ch <-chan job.Event) []job.Event {
	t.Helper()
	var evs []job.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("stream did not close; got %v", evs)
		}
	}
}

func TestEventsReplayOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted)
	ctx := t.Context()
	q := h.submit(t, "acme", call("echo", `{"text":"hello out there"}`))

	live, err := h.svc.Subscribe(ctx, "acme", q.ID) // before the job starts
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := []job.EventType{job.EventQueued, job.EventStarted, job.EventStdout, job.EventFinished}
	evs := collect(t, live)
	var types []job.EventType
	for i, ev := range evs {
		types = append(types, ev.Type)
		if ev.Seq != i+1 {
			t.Errorf("event %d has seq %d", i, ev.Seq)
		}
		if ev.Time.IsZero() {
			t.Errorf("event %d has no time", i)
		}
	}
	if !equalTypes(types, want) {
		t.Fatalf("live events %v, want %v", types, want)
	}
	if evs[0].Job.State != job.StateQueued || evs[1].Job.State != job.StateRunning ||
		evs[2].Data != "hello out there" || evs[3].Job.State != job.StateSucceeded {
		t.Errorf("event payloads: %+v", evs)
	}

	// A late subscriber gets the same history and a closed channel.
	late, err := h.svc.Subscribe(ctx, "acme", q.ID)
	if err != nil {
		t.Fatal(err)
	}
	replay := collect(t, late)
	if len(replay) != len(evs) {
		t.Fatalf("replay has %d events, want %d", len(replay), len(evs))
	}
	for i := range replay {
		if replay[i].Seq != evs[i].Seq || replay[i].Type != evs[i].Type {
			t.Errorf("replay[%d] = %d/%s, want %d/%s", i, replay[i].Seq, replay[i].Type, evs[i].Seq, evs[i].Type)
		}
	}
}

func TestSubscribeContextEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.submit(t, "acme", call("wait", `{}`))
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := h.svc.Subscribe(ctx, "acme", q.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != job.EventQueued {
		t.Fatalf("first event %s", ev.Type)
	}
	cancel()
	for range ch { // drains and ends: the channel is closed
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted, func(c *job.Config, _ *harness) { c.Queue.Size = 3 })
	ctx := t.Context()
	ids := []string{
		h.submit(t, "acme", call("echo", `{"text":"a"}`)).ID,
		h.submit(t, "acme", call("sh", `{"cmd":"exit","arg":"1"}`)).ID,
		h.submit(t, "globex", call("add", `{"a":1,"b":2}`)).ID,
	}
	if _, _, err := h.svc.Submit(ctx, "acme", call("add", `{"a":1,"b":2}`)); err == nil {
		t.Fatal("queue of 3 took a fourth job")
	}
	if err := testutil.GatherAndCompare(h.prom, strings.NewReader(`
# HELP sandboxd_queue_depth Jobs accepted and waiting for a worker.
# TYPE sandboxd_queue_depth gauge
sandboxd_queue_depth 3
# HELP sandboxd_queue_rejected_total Submissions rejected because the job queue was full.
# TYPE sandboxd_queue_rejected_total counter
sandboxd_queue_rejected_total 1
`), "sandboxd_queue_depth", "sandboxd_queue_rejected_total"); err != nil {
		t.Error(err)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		tenant := "acme"
		if i == 2 {
			tenant = "globex"
		}
		h.wait(t, tenant, id)
	}
	// A job's result does not wait for its sandbox to be destroyed.
	eventually(t, "the sandboxes destroyed", func() bool {
		return testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_sandboxes_alive")) == 0
	})
	if err := testutil.GatherAndCompare(h.prom, strings.NewReader(`
# HELP sandboxd_effects_spent_total Effects spent by tool calls that ran, by tenant, tool and effect.
# TYPE sandboxd_effects_spent_total counter
sandboxd_effects_spent_total{effect="exec",tenant="acme",tool="echo"} 1
sandboxd_effects_spent_total{effect="exec",tenant="acme",tool="sh"} 1
sandboxd_effects_spent_total{effect="file_write",tenant="acme",tool="sh"} 1
sandboxd_effects_spent_total{effect="http",tenant="acme",tool="sh"} 1
# HELP sandboxd_jobs_in_flight Jobs currently running.
# TYPE sandboxd_jobs_in_flight gauge
sandboxd_jobs_in_flight 0
# HELP sandboxd_jobs_total Jobs that reached a terminal state, by tenant, tool, runner and outcome (ok, tool_error, timeout, cancelled, error, lost, refused).
# TYPE sandboxd_jobs_total counter
sandboxd_jobs_total{outcome="ok",runner="fake",tenant="acme",tool="echo"} 1
sandboxd_jobs_total{outcome="ok",runner="inprocess",tenant="globex",tool="add"} 1
sandboxd_jobs_total{outcome="tool_error",runner="fake",tenant="acme",tool="sh"} 1
# HELP sandboxd_queue_depth Jobs accepted and waiting for a worker.
# TYPE sandboxd_queue_depth gauge
sandboxd_queue_depth 0
# HELP sandboxd_sandboxes_alive Sandboxes created by the job service and not yet closed.
# TYPE sandboxd_sandboxes_alive gauge
sandboxd_sandboxes_alive 0
`), "sandboxd_effects_spent_total", "sandboxd_jobs_in_flight", "sandboxd_jobs_total", "sandboxd_queue_depth", "sandboxd_sandboxes_alive"); err != nil {
		t.Error(err)
	}
	if counts := metricValues(t, h.prom, "sandboxd_job_duration_seconds", nil); len(counts) != 3 {
		t.Errorf("duration series %v, want 3 (one per tool and runner)", counts)
	}
	problems, err := testutil.GatherAndLint(h.prom)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// metricValues gathers g and returns the value (counter, gauge or
// histogram sample count) of every series of the named family whose labels
// include want.
func metricValues(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) []float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var vals []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				vals = append(vals, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				vals = append(vals, m.GetGauge().GetValue())
			case m.GetHistogram() != nil:
				vals = append(vals, float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
	return vals
}

// TestSubscribeRetired: finished jobs leave memory; their events, output
// included, are replayed from the store.
func TestSubscribeRetired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Queue.Size = 200 })
	first := h.submit(t, "acme", call("echo", `{"text":"old"}`))
	h.wait(t, "acme", first.ID)
	for range 100 {
		h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
	}
	jobs, _, err := h.svc.List(t.Context(), "acme", job.ListFilter{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, "acme", jobs[0].ID)
	ch, err := h.svc.Subscribe(t.Context(), "acme", first.ID)
	if err != nil {
		t.Fatal(err)
	}
	var types []job.EventType
	var out string
	for _, ev := range collect(t, ch) {
		types = append(types, ev.Type)
		out += ev.Data
		if ev.Type == job.EventFinished && (ev.Job == nil || ev.Job.Result == nil || ev.Job.Result.Content != "old") {
			t.Errorf("finished event's job %+v", ev.Job)
		}
	}
	if want := []job.EventType{job.EventQueued, job.EventStarted, job.EventStdout, job.EventFinished}; !equalTypes(types, want) || out != "old" {
		t.Errorf("retired job events %v %q, want %v with its output", types, out, want)
	}
}

// TestFinishedRecordedWithEvents: on SQLite (a job.FinishWriter) a job's
// terminal state and its events not yet written, the finished event among
// them, are one write: once Wait returns, the store has both (the event
// sink alone writes 5 ms after an event). The job finishes once its first
// events were flushed, so no flush of it runs when it finishes (record
// then leaves it to the sink) and the write is certain.
func TestFinishedRecordedWithEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.submit(t, "acme", call("wait", `{}`))
	h.waitRunning(t, "acme", q.ID)
	time.Sleep(100 * time.Millisecond) // queued and started are flushed
	close(h.gate)
	h.wait(t, "acme", q.ID)
	j, err := h.st.Get(t.Context(), q.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.st.ListEvents(t.Context(), q.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []job.EventType
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := []job.EventType{job.EventQueued, job.EventStarted, job.EventFinished}
	if j.State != job.StateSucceeded || !equalTypes(types, want) {
		t.Fatalf("right after Wait the store has the job %s with events %v, want succeeded with %v", j.State, types, want)
	}
}
