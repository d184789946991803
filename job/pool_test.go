package job_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolHitRefillNeverReused(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Pool: config.Pool{Size: ptr(2)}})
	// One key: sh and python_repl share the default profile.
	eventually(t, "pre-warm", func() bool {
		return testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")) == 2
	})
	dirs := map[string]bool{}
	for range 3 {
		j := h.run(t, "acme", "", "sh", `{"cmd":"pwd"}`)
		if j.State != job.StateSucceeded {
			t.Fatalf("job: %+v", j.Result)
		}
		if dirs[j.Result.Content] {
			t.Fatalf("workspace %s served two jobs", j.Result.Content)
		}
		dirs[j.Result.Content] = true
		eventually(t, "refill", func() bool {
			return testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")) == 2
		})
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_hits_total")); got != 3 {
		t.Fatalf("hits = %v", got)
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_sandboxes_alive")); got != 2 {
		t.Fatalf("sandboxes_alive = %v", got)
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")); got != 2 {
		t.Fatalf("pool_ready = %v", got)
	}
	// Non-default limits: a fresh sandbox, not counted as hit or miss.
	before := h.fr.Created()
	req := `{"cmd":"true"}`
	j, _, err := h.svc.Submit(t.Context(), "acme", jobReq("sh", req, runner.Limits{MemoryBytes: 1 << 30}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if j, err = h.svc.Wait(wctx, "acme", j.ID); err != nil || j.State != job.StateSucceeded {
		t.Fatalf("fresh job: %+v %v", j, err)
	}
	if h.fr.Created() != before+1 {
		t.Fatalf("created %d, want %d", h.fr.Created(), before+1)
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_misses_total")); got != 0 {
		t.Fatalf("misses = %v", got)
	}
	// Shutdown closes the pooled sandboxes.
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := h.svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if h.fr.Created() != h.fr.Closed() {
		t.Fatalf("after shutdown: created %d closed %d", h.fr.Created(), h.fr.Closed())
	}
}

func TestPoolRespectsCap(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Pool: config.Pool{Size: ptr(3), MaxSandboxes: 2}})
	eventually(t, "pre-warm", func() bool { return h.fr.Created() == 2 })
	time.Sleep(50 * time.Millisecond)
	if h.fr.Created() != 2 {
		t.Fatalf("created %d past the cap of 2", h.fr.Created())
	}
	// A session evicts a pooled sandbox to stay within the cap.
	if _, err := h.svc.CreateSession(t.Context(), "acme", job.SessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if alive := h.fr.Created() - h.fr.Closed(); alive != 2 {
		t.Fatalf("alive = %d", alive)
	}
	// The pool is disabled with size 0.
	h0 := newSessHarness(t, nil, job.Config{})
	h0.run(t, "acme", "", "sh", `{"cmd":"true"}`)
	eventually(t, "the one-shot sandbox closed", func() bool { return h0.fr.Closed() == 1 })
	if h0.fr.Created() != 1 || h0.fr.Closed() != 1 {
		t.Fatalf("no pool: created %d closed %d", h0.fr.Created(), h0.fr.Closed())
	}
}

func TestPoolMissAndRefillAfterCap(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Pool: config.Pool{Size: ptr(1), MaxSandboxes: 1}})
	eventually(t, "pre-warm", func() bool { return h.fr.Created() == 1 })
	// The session takes the only slot: the pooled sandbox, which fits it
	// (a hit, nothing created or closed).
	s, err := h.svc.CreateSession(t.Context(), "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h.fr.Closed() != 0 || h.fr.Created() != 1 {
		t.Fatalf("the session did not take the pooled sandbox: created %d closed %d", h.fr.Created(), h.fr.Closed())
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_hits_total")); got != 1 {
		t.Fatalf("hits = %v", got)
	}
	// A second session does not fit.
	if _, err := h.svc.CreateSession(t.Context(), "acme", job.SessionRequest{}); !errors.Is(err, job.ErrSessionLimit) {
		t.Fatalf("past the cap: %v", err)
	}
	// A one-shot job misses and runs in a fresh sandbox anyway.
	if j := h.run(t, "acme", "", "sh", `{"cmd":"true"}`); j.State != job.StateSucceeded {
		t.Fatalf("job: %+v", j.Result)
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_misses_total")); got != 1 {
		t.Fatalf("misses = %v", got)
	}
	created := h.fr.Created()
	// Closing the session makes room: the pool refills.
	if _, err := h.svc.CloseSession(t.Context(), "acme", s.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "refill after close", func() bool {
		return h.fr.Created() == created+1 && testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")) == 1
	})
	if j := h.run(t, "acme", "", "sh", `{"cmd":"true"}`); j.State != job.StateSucceeded {
		t.Fatalf("job: %+v", j.Result)
	}
	if got := testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_hits_total")); got != 2 { // the session's and this job's
		t.Fatalf("hits = %v", got)
	}
	eventually(t, "refill after the hit", func() bool { return h.fr.Created()-h.fr.Closed() == 1 })
}

func ptr[T any](v T) *T { return &v }

// The pool grows after misses (doubling up to pool.max_ready), within the
// memory budget, and shrinks back to pool.size while nothing misses.
func TestPoolGrowsAndShrinks(t *testing.T) {
	restore := job.SetShrinkEvery(300 * time.Millisecond)
	defer restore()
	// While the burst runs, the pool's refills wait: its calls after the
	// first find the pool empty however fast the fake makes a sandbox (on
	// a loaded machine a refill otherwise won the race and nothing missed).
	fr := fake.New()
	var refills atomic.Pointer[chan struct{}]
	fr.CreateHook = func(ctx context.Context, spec runner.SandboxSpec) error {
		if g := refills.Load(); g != nil && spec.Labels["pool"] != "" {
			select {
			case <-*g:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	h := newSessHarness(t, fr, job.Config{Pool: config.Pool{Size: ptr(1), MaxReady: 4, MaxSandboxes: 32}})
	h.fr = fr
	eventually(t, "pre-warm", func() bool { return h.fr.Created() == 1 })
	alive := func() int { return h.fr.Created() - h.fr.Closed() }
	// A burst: one hit, then misses.
	gate := make(chan struct{})
	refills.Store(&gate)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			h.run(t, "acme", "", "sh", `{"cmd":"true"}`)
		}()
	}
	for range 4 {
		<-done
	}
	close(gate)
	misses := int(testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_misses_total")))
	if misses < 1 {
		t.Fatalf("misses = %v", misses)
	}
	want := min(1<<misses, 4) // doubled at each miss, up to pool.max_ready
	eventually(t, "grown after the misses", func() bool {
		return testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")) == float64(want) && alive() == want
	})
	time.Sleep(200 * time.Millisecond)
	if a := alive(); a > 4 {
		t.Fatalf("%d sandboxes alive past pool.max_ready 4", a)
	}
	// No misses: back down to pool.size, one step per interval.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")) != 1 || alive() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("did not shrink: ready %v alive %d", testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_pool_ready")), alive())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A memory budget of two sandboxes' limits caps the growth at 2.
	hb := newSessHarness(t, nil, job.Config{Pool: config.Pool{Size: ptr(1), MaxReady: 8, MaxSandboxes: 32, MemoryBudget: 2 << 30},
		Limits: config.Limits{Defaults: runner.Limits{MemoryBytes: 1 << 30}}})
	eventually(t, "pre-warm", func() bool { return hb.fr.Created() == 1 })
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			hb.run(t, "acme", "", "sh", `{"cmd":"true"}`)
		}()
	}
	for range 4 {
		<-done
	}
	eventually(t, "grown to the budget", func() bool {
		return testutil.ToFloat64(mustGauge(t, hb.prom, "sandboxd_pool_ready")) == 2 ||
			testutil.ToFloat64(mustGauge(t, hb.prom, "sandboxd_pool_misses_total")) == 0
	})
	time.Sleep(200 * time.Millisecond)
	if r := testutil.ToFloat64(mustGauge(t, hb.prom, "sandboxd_pool_ready")); r > 2 {
		t.Fatalf("ready %v past the memory budget of 2", r)
	}
}
