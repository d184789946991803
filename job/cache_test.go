package job_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

// TestResultCache: an identical call of a cacheable tool is answered from
// the cache (Cached, succeeded, nothing run); other arguments, another
// tenant or a disabled cache run it; the cache holds at most MaxEntries.
func TestResultCache(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Cache = config.ToolCache{MaxEntries: 2} })
	runs := func() int64 { return cacheRuns.Load() }
	do := func(tenant, args string) *job.Job {
		t.Helper()
		return h.wait(t, tenant, h.submit(t, tenant, call("sum", args)).ID)
	}
	n := runs()
	first := do("acme", `{"a":1,"b":2}`)
	if first.Cached || first.Result.Content != "3" || runs() != n+1 {
		t.Fatalf("first call: cached %v %+v", first.Cached, first.Result)
	}
	again := do("acme", `{"b":2,"a":1}`) // same arguments, another key order
	if !again.Cached || again.State != job.StateSucceeded || again.Result.Content != "3" || runs() != n+1 {
		t.Fatalf("second call: cached %v %+v (runs %d)", again.Cached, again.Result, runs()-n)
	}
	if got, _ := h.svc.Get(t.Context(), "acme", again.ID); !got.Cached {
		t.Error("the stored job lost Cached")
	}
	if j := do("globex", `{"a":1,"b":2}`); j.Cached || runs() != n+2 {
		t.Errorf("another tenant's call was answered from acme's cache")
	}
	do("acme", `{"a":5,"b":5}`)
	do("acme", `{"a":6,"b":6}`) // evicts 1+2 (max 2 entries)
	if j := do("acme", `{"a":1,"b":2}`); j.Cached {
		t.Errorf("an evicted entry answered")
	}
	if j := do("acme", `{"a":1,"b":2}`); !j.Cached {
		t.Errorf("re-cached entry missed")
	}
	if j := do("acme", `{"a":2,"b":3}`); j.Cached {
		t.Errorf("other arguments hit")
	}
	// A tool without a cache policy always runs.
	a1, a2 := do("acme", `{"a":1,"b":1}`), h.wait(t, "acme", h.submit(t, "acme", call("add", `{"a":1,"b":1}`)).ID)
	if a2.Cached || a1.Tool == a2.Tool {
		t.Errorf("add was cached")
	}
}
