package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// TestRetention: finished jobs past retention.max_age are deleted with
// their events; running jobs stay; the work is in the metrics.
func TestRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Retention = config.Retention{MaxAge: time.Millisecond, MaxBytes: -1, Interval: 20 * time.Millisecond}
	})
	done := h.submit(t, "acme", call("sh", `{"cmd":"echo","arg":"bye"}`))
	h.wait(t, "acme", done.ID)
	running := h.submit(t, "acme", call("wait", `{}`))
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.svc.Get(t.Context(), "acme", done.ID)
		if errors.Is(err, job.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished job not deleted by retention: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if evs, err := h.st.ListEvents(t.Context(), done.ID, 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("events of a deleted job: %d %v", len(evs), err)
	}
	if j, err := h.svc.Get(t.Context(), "acme", running.ID); err != nil || j.State.Terminal() {
		t.Fatalf("unfinished job: %+v %v", j, err)
	}
	// The pass counts what it deleted once it ends (after compaction): the
	// job may be gone from the store before.
	for {
		v := metricValues(t, h.prom, "sandboxd_retention_deleted_jobs_total", nil)
		if len(v) == 1 && v[0] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted jobs metric %v", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v := metricValues(t, h.prom, "sandboxd_retention_deleted_bytes_total", nil); len(v) != 1 || v[0] <= 0 {
		t.Errorf("deleted bytes metric %v", v)
	}
	if v := metricValues(t, h.prom, "sandboxd_retention_last_run_timestamp_seconds", nil); len(v) != 1 || v[0] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last run metric %v", v)
	}
	if v := metricValues(t, h.prom, "sandboxd_store_bytes", nil); len(v) != 1 || v[0] <= 0 {
		t.Errorf("store bytes metric %v", v)
	}
	if v := metricValues(t, h.prom, "sandboxd_store_file_bytes", nil); len(v) != 1 || v[0] <= 0 {
		t.Errorf("store file bytes metric %v", v)
	}
}

// TestRetentionMaxBytes: over retention.max_bytes the earliest finished
// jobs go first.
func TestRetentionMaxBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted, func(c *job.Config, _ *harness) {
		c.Retention = config.Retention{MaxAge: -1, MaxBytes: 1 << 20, Interval: 20 * time.Millisecond}
	})
	big := tools.Result{OK: true, Content: strings.Repeat("z", 200<<10)}
	if err := h.svc.Registry().Register(&tools.Tool{Name: "big", Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
		return big, nil
	}}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 12 {
		j := h.submit(t, "acme", call("big", `{}`))
		ids = append(ids, j.ID)
	}
	if err := h.svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "acme", ids[len(ids)-1]) // the earlier ones may be deleted already
	deadline := time.Now().Add(10 * time.Second)
	for {
		sz, err := h.st.Size(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if sz.Bytes <= 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store still %d bytes, max 1 MiB", sz.Bytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := h.svc.Get(t.Context(), "acme", ids[0]); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("earliest job kept: %v", err)
	}
	if _, err := h.svc.Get(t.Context(), "acme", ids[len(ids)-1]); err != nil {
		t.Errorf("newest job deleted: %v", err)
	}
}

// TestArtifactsStoredApart: a tool's artifacts are stored apart; the
// result keeps references with plain names; they are read by tenant.
func TestArtifactsStoredApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	png := []byte("\x89PNG\r\n\x1a\n\x00\x01binary")
	if err := h.svc.Registry().Register(&tools.Tool{Name: "plot", Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
		return tools.Result{OK: true, Content: "two figures", Artifacts: []tools.Artifact{
			{Name: "fig.png", MimeType: "image/png", Data: png},
			{Name: "fig.png", MimeType: "image/png", Data: []byte("second")},
			{Name: "../../etc/passwd", MimeType: "text/plain", Data: []byte("sneaky")},
		}}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	j := h.wait(t, "acme", h.submit(t, "acme", call("plot", `{}`)).ID)
	var names []string
	for _, a := range j.Result.Artifacts {
		if len(a.Data) != 0 || a.URL != job.ArtifactURL(j.ID, a.Name) {
			t.Errorf("artifact reference %+v", a)
		}
		names = append(names, a.Name)
	}
	if got := strings.Join(names, ","); got != "fig.png,fig-2.png,artifact-3.txt" {
		t.Errorf("artifact names %s", got)
	}
	stored, err := h.st.Get(t.Context(), j.ID)
	if err != nil || len(stored.Result.Artifacts) != 3 || len(stored.Result.Artifacts[0].Data) != 0 {
		t.Fatalf("stored job %+v %v", stored.Result, err)
	}
	a, err := h.svc.Artifact(t.Context(), "acme", j.ID, "fig.png")
	if err != nil || string(a.Data) != string(png) || a.Size != int64(len(png)) {
		t.Fatalf("Artifact: %+v %v", a, err)
	}
	if _, err := h.svc.Artifact(t.Context(), "other", j.ID, "fig.png"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("other tenant: %v, want ErrNotFound", err)
	}
}

// TestStoredResultBounded: what a terminal record keeps of a result is
// capped (an in-process tool may return any size).
func TestStoredResultBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	huge := strings.Repeat("h", 5<<20)
	if err := h.svc.Registry().Register(&tools.Tool{Name: "huge", Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
		return tools.Result{OK: false, Content: huge, Error: huge}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	req := call("huge", `{}`)
	req.Limits = runner.Limits{OutputBytes: 256 << 10}
	j := h.wait(t, "acme", h.submit(t, "acme", req).ID)
	stored, err := h.st.Get(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := stored.Result
	if len(r.Content) > 512<<10+4096+64 || len(r.Error) > 64<<10+64 || !r.Truncated ||
		!strings.Contains(r.Content, "bytes truncated ...]") || !strings.HasPrefix(r.Content, "hhh") || !strings.HasSuffix(r.Content, "hhh") {
		t.Fatalf("stored result: content %d bytes, error %d, truncated %v", len(r.Content), len(r.Error), r.Truncated)
	}
}

// TestEventsStoredInBatches: a job's output reaches the store in a few
// writes, capped at its output limit (head and tail), and finished jobs
// leave nothing in memory: a replay comes from the store.
func TestEventsStoredInBatches(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := call("sh", `{"cmd":"flood","arg":"1048576"}`)
	req.Limits = runner.Limits{OutputBytes: 64 << 10}
	j := h.wait(t, "acme", h.submit(t, "acme", req).ID)
	var evs []job.EventRecord
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if evs, err = h.st.ListEvents(t.Context(), j.ID, 0, 1000); err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 && evs[len(evs)-1].Type == job.EventFinished {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished event not stored: %d events", len(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out strings.Builder
	for _, ev := range evs {
		if ev.Type == job.EventStdout {
			out.WriteString(ev.Data)
		}
	}
	s := out.String()
	var flood strings.Builder
	for i := 0; flood.Len() < 1<<20; i++ {
		fmt.Fprintf(&flood, "line %07d\n", i)
	}
	last := flood.String()[1<<20-100 : 1<<20]
	if len(s) > 64<<10+64 || !strings.HasPrefix(s, "line 0000000\n") || !strings.Contains(s, "bytes truncated ...]") ||
		!strings.HasSuffix(s, last) {
		t.Errorf("stored output %d bytes: %q ... %q", len(s), s[:min(40, len(s))], s[max(0, len(s)-40):])
	}
	if v := metricValues(t, h.prom, "sandboxd_event_batches_total", nil); len(v) != 1 || v[0] > 100 {
		t.Errorf("256 output chunks took %v writes", v)
	}
	// The replay (from the store) equals what was stored.
	ch, err := h.svc.Subscribe(t.Context(), "acme", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var replay strings.Builder
	for _, ev := range collect(t, ch) {
		replay.WriteString(ev.Data)
	}
	if replay.String() != s {
		t.Errorf("replay %d bytes, stored %d", replay.Len(), len(s))
	}
}
