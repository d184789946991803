package job_test

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// A session's tool limit and session budget, the same on both stores:
// two echo calls per session, the third is usage_limit; another session
// starts from zero.
func TestGuardSessionLimits(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
tool_limits:
  - tool: echo
    max_calls: 2
budgets:
  - effect: exec
    limit: 5
    per: 1h
    scope: session
`))
		ctx := t.Context()
		echo := func(session string) *job.Job {
			t.Helper()
			req := call("echo", `{"text":"x"}`)
			req.SessionID = session
			return h.wait(t, "acme", h.submit(t, "acme", req).ID)
		}
		for range 2 {
			s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Effects: []tools.Effect{tools.EffectExec}})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"", "", job.ReasonUsageLimit} {
				if j := echo(s.ID); j.Reason != want {
					t.Fatalf("session %s call %d: %s/%s, want reason %q", s.ID, i, j.State, j.Reason, want)
				}
			}
		}
	})
}

// A result cache hit takes a rate limit token, the same on both stores;
// the call past the burst is refused even though its answer is cached.
func TestGuardRateLimitCacheHit(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rate_limit:
  rate: 0.001
  burst: 2
`), func(c *job.Config, _ *harness) { c.Cache = config.ToolCache{MaxEntries: 16} })
		for i, want := range []struct {
			reason string
			cached bool
		}{{"", false}, {"", true}, {job.ReasonRateLimited, false}} {
			j := h.wait(t, "acme", h.submit(t, "acme", call("sum", `{"a":1,"b":2}`)).ID)
			if j.Reason != want.reason || j.Cached != want.cached {
				t.Fatalf("call %d: %s/%s cached %v, want reason %q cached %v", i, j.State, j.Reason, j.Cached, want.reason, want.cached)
			}
		}
	})
}

// On a replica (the queue in the store), a call over its budget while the
// queue is full is refused by the guard, not by the full queue, as on
// SQLite.
func TestGuardBeforeFullSharedQueue(t *testing.T) {
	h := newHarness(t, onPostgres(t, ""), withPolicy(t, "acme", `
budgets:
  - effect: exec
    limit: 1
    per: 1h
`), func(c *job.Config, _ *harness) {
		c.Queue = config.Queue{Workers: 1, Size: 1}
		c.Replica = &job.ReplicaConfig{ID: "r1"}
	})
	running := h.submit(t, "acme", call("wait", `{}`))
	h.waitRunning(t, "acme", running.ID)
	if j := h.submit(t, "acme", call("echo", `{"text":"x"}`)); j.State != job.StateQueued { // spends the unit, fills the queue
		t.Fatalf("second call: %s/%s", j.State, j.Reason)
	}
	if _, _, err := h.svc.Submit(t.Context(), "acme", call("add", `{"a":1,"b":1}`)); !errors.Is(err, job.ErrQueueFull) {
		t.Fatalf("a call the guard lets through, queue full: %v, want ErrQueueFull", err)
	}
	if j := h.submit(t, "acme", call("echo", `{"text":"y"}`)); j.Reason != job.ReasonBudgetExhausted {
		t.Fatalf("over budget, queue full: %s/%s, want budget_exhausted", j.State, j.Reason)
	}
}
