package job_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store"
)

// TestRecovery plays a restart: records left queued and running by a dead
// process, then a new service on the same database.
func TestRecovery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	created := time.Now().UTC().Add(-time.Minute)
	started := created.Add(time.Second)
	r := &fakeRunner{}
	svc, prom := restartOn(t, r, nil,
		&job.Job{ID: "job_queued", Tenant: "acme", Tool: "echo", CallID: "c1", Args: json.RawMessage(`{"text":"again"}`),
			Runner: "fake", State: job.StateQueued, CreatedAt: created},
		&job.Job{ID: "job_running", Tenant: "acme", Tool: "echo", CallID: "c2", Args: json.RawMessage(`{"text":"lost"}`),
			Runner: "fake", State: job.StateRunning, Attempts: 1, CreatedAt: created, StartedAt: &started},
		&job.Job{ID: "job_gone_tool", Tenant: "acme", Tool: "removed", CallID: "c3", Args: json.RawMessage(`{}`),
			Runner: "fake", State: job.StateQueued, CreatedAt: created.Add(time.Millisecond)},
	)
	if r.reaped != 1 {
		t.Errorf("Reap called %d times, want 1", r.reaped)
	}

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, err := svc.Wait(wctx, "acme", "job_queued")
	if err != nil || j.State != job.StateSucceeded || j.Result.Content != "again" || j.Attempts != 1 {
		t.Errorf("queued job after restart: %+v %+v, %v; want it run", j, j.Result, err)
	}
	j, err = svc.Get(ctx, "acme", "job_running")
	if err != nil || j.State != job.StateFailed || j.Reason != job.ReasonLost || j.FinishedAt == nil ||
		j.Result == nil || j.Result.OK || j.Result.Error != "sandboxd restarted while the job was running" {
		t.Errorf("running job after restart: %+v, %v; want failed/lost", j, err)
	}
	j, err = svc.Wait(wctx, "acme", "job_gone_tool")
	if err != nil || j.State != job.StateFailed || j.Reason != job.ReasonInternal {
		t.Errorf("queued job of a removed tool: %+v, %v; want failed/internal", j, err)
	}
	if got := metricValues(t, prom, "sandboxd_jobs_total", map[string]string{"tool": "echo", "outcome": job.OutcomeLost}); len(got) != 1 || got[0] != 1 {
		t.Errorf("lost jobs counted %v, want 1", got)
	}

	// The lost job's events are synthesized from its record.
	ch, err := svc.Subscribe(ctx, "acme", "job_running")
	if err != nil {
		t.Fatal(err)
	}
	var types []job.EventType
	for ev := range ch {
		types = append(types, ev.Type)
	}
	if want := []job.EventType{job.EventQueued, job.EventStarted, job.EventFinished}; !equalTypes(types, want) {
		t.Errorf("synthesized events %v, want %v", types, want)
	}
}

// TestRecoveryRerunsRetrySafe: a job that asked for retries (Job.Retry,
// kept in the store) and whose process died while it ran runs again at
// the next start when its tool cannot do anything twice and attempts are
// left; otherwise it ends lost as before.
func TestRecoveryRerunsRetrySafe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	created := time.Now().UTC().Add(-time.Minute)
	started := created.Add(time.Second)
	running := func(id, tool, args string, retry bool, attempts int) *job.Job {
		return &job.Job{ID: id, Tenant: "acme", Tool: tool, CallID: id, Args: json.RawMessage(args), Runner: "fake",
			State: job.StateRunning, Attempts: attempts, CreatedAt: created, StartedAt: &started, Retry: retry}
	}
	svc, prom := restartOn(t, &fakeRunner{}, func(c *job.Config) { c.Turns.Retries = 1 },
		running("job_rerun", "add", `{"a":1,"b":2}`, true, 1),     // retry-safe, attempts left: runs again
		running("job_no_retry", "add", `{"a":1,"b":2}`, false, 1), // did not ask
		running("job_exec", "echo", `{"text":"x"}`, true, 1),      // exec: may have done it
		running("job_spent", "add", `{"a":1,"b":2}`, true, 2),     // 1 + Retries attempts started
		// A session's job left queued (perhaps running: a session's short
		// call is written running late): its sandbox died with the process.
		&job.Job{ID: "job_session", Tenant: "acme", Tool: "add", CallID: "cs", Args: json.RawMessage(`{"a":1,"b":2}`), Runner: "fake",
			SessionID: "ses_gone", State: job.StateQueued, CreatedAt: created, Retry: true},
	)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, err := svc.Wait(wctx, "acme", "job_rerun")
	if err != nil || j.State != job.StateSucceeded || j.Result.Content != "3" || j.Attempts != 2 || !j.Retry {
		t.Errorf("retry-safe job after restart: %+v %+v, %v; want it run again (2 attempts)", j, j.Result, err)
	}
	for _, id := range []string{"job_no_retry", "job_exec", "job_spent", "job_session"} {
		j, err := svc.Get(ctx, "acme", id)
		if err != nil || j.State != job.StateFailed || j.Reason != job.ReasonLost {
			t.Errorf("%s after restart: %+v, %v; want failed/lost", id, j, err)
		}
	}
	if got := metricValues(t, prom, "sandboxd_job_infrastructure_failures_total", map[string]string{"tool": "add", "action": "retried"}); len(got) != 1 || got[0] != 1 {
		t.Errorf("retries counted %v, want 1", got)
	}
	// Its events: the first attempt's, then the second's.
	ch, err := svc.Subscribe(ctx, "acme", "job_rerun")
	if err != nil {
		t.Fatal(err)
	}
	var types []job.EventType
	for ev := range ch {
		types = append(types, ev.Type)
	}
	if n := countType(types, job.EventStarted); n < 1 || types[len(types)-1] != job.EventFinished {
		t.Errorf("events %v: want a started event and the finished one last", types)
	}
}

func countType(ts []job.EventType, want job.EventType) int {
	n := 0
	for _, t := range ts {
		if t == want {
			n++
		}
	}
	return n
}

// restartOn plays a restart: records left by a dead process in a new
// database, then a service (tune adjusts its config) started on it with
// runner r. It is shut down at the end of the test.
func restartOn(t *testing.T, r *fakeRunner, tune func(*job.Config), records ...*job.Job) (*job.Service, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range records {
		if err := st.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	st.Close() // the old process is gone

	st, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	cfg := job.Config{WorkDir: filepath.Join(dir, "work"), Metrics: job.NewMetrics(prom)}
	if tune != nil {
		tune(&cfg)
	}
	svc, err := job.New(cfg, st, testTools(t, nil), r)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		svc.Shutdown(sctx)
		st.Close()
	})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return svc, prom
}
