package job_test

import (
	"strings"
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

// TestResultCacheWorkspace: a read-only file tool is cached within its
// session while the workspace is unchanged; an upload changes it (the next
// call runs and sees the new content); outside a session it is not cached.
func TestResultCacheWorkspace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Cache = config.ToolCache{MaxEntries: 16} })
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(content string) {
		t.Helper()
		if _, err := h.svc.PutFile(ctx, "acme", s.ID, "f", strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	peek := func() *job.Job {
		t.Helper()
		req := call("peek", `{}`)
		req.SessionID = s.ID
		return h.wait(t, "acme", h.submit(t, "acme", req).ID)
	}
	put("one")
	if j := peek(); j.Cached || j.Result.Content != "one" {
		t.Fatalf("first: %v %+v", j.Cached, j.Result)
	}
	if j := peek(); !j.Cached || j.Result.Content != "one" {
		t.Fatalf("repeat: %v %+v", j.Cached, j.Result)
	}
	put("two")
	if j := peek(); j.Cached || j.Result.Content != "two" {
		t.Fatalf("after an upload: cached %v %+v", j.Cached, j.Result)
	}
	if j := h.wait(t, "acme", h.submit(t, "acme", call("peek", `{}`)).ID); j.Cached {
		t.Fatalf("outside a session: cached")
	}
}
