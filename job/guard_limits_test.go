package job_test

import (
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
