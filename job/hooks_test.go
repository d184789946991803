package job_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

// TestToolHooks runs hooks against a server on loopback (allowed by the
// hooks' allow_private_cidrs): a before hook that denies, one that
// rewrites the arguments (validated again; an invalid rewrite refuses
// the call), one that times out under fail-closed and under fail-open,
// an after hook that redacts; every request is signed and recorded.
func TestToolHooks(t *testing.T) {
	t.Parallel()
	var badSig atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Sandboxd-Signature") != job.WebhookSignature([]byte("hook-secret"), r.Header.Get("X-Sandboxd-Timestamp"), body) {
			badSig.Add(1)
		}
		var c struct {
			Tool      string         `json:"tool"`
			Tenant    string         `json:"tenant"`
			Arguments map[string]any `json:"arguments"`
			Result    *struct {
				Content string `json:"content"`
			} `json:"result"`
		}
		_ = json.Unmarshal(body, &c)
		switch r.URL.Path {
		case "/deny":
			io.WriteString(w, `{"action":"deny","reason":"not on fridays"}`)
		case "/rewrite":
			if c.Arguments["a"] == 1.0 {
				io.WriteString(w, `{"action":"allow","arguments":{"a":10,"b":20}}`)
				return
			}
			io.WriteString(w, `{"action":"allow","arguments":{"a":"ten"}}`)
		case "/slow":
			time.Sleep(2 * time.Second)
		case "/redact":
			io.WriteString(w, `{"content":"[redacted: `+c.Result.Content+` was secret]"}`)
		}
	}))
	t.Cleanup(srv.Close)
	hk := func(tenant, tools, before, after string, failOpen bool) config.Hook {
		h := config.Hook{Tenant: tenant, Tools: tools, Secret: "hook-secret", Timeout: 300 * time.Millisecond,
			FailOpen: failOpen, AllowPrivateCIDRs: []string{"127.0.0.1/32"}}
		if before != "" {
			h.Before = srv.URL + before
		}
		if after != "" {
			h.After = srv.URL + after
		}
		return h
	}
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Hooks = []config.Hook{
			hk("deny", "a?d", "/deny", "", false),
			hk("rewrite", "add", "/rewrite", "/redact", false),
			hk("closed", "*", "/slow", "", false),
			hk("open", "ad*", "/slow", "", true),
			{Tenant: "guarded", Before: srv.URL + "/deny"}, // loopback, not allowed: the address guard refuses
		}
	})
	run := func(tenant, args string) *job.Job {
		t.Helper()
		return h.wait(t, tenant, h.submit(t, tenant, call("add", args)).ID)
	}
	if j := run("deny", `{"a":1,"b":2}`); j.State != job.StateFailed || !strings.Contains(j.Result.Error, "refused by hook: not on fridays") ||
		len(j.Hooks) != 1 || j.Hooks[0].Outcome != "deny" {
		t.Errorf("deny: %s %+v %+v", j.State, j.Result, j.Hooks)
	}
	j := run("rewrite", `{"a":1,"b":2}`)
	if j.State != job.StateSucceeded || j.Result.Content != "[redacted: 30 was secret]" || string(j.Args) != `{"a":10,"b":20}` ||
		len(j.Hooks) != 2 || j.Hooks[0].Outcome != "rewrite" || j.Hooks[1].Outcome != "redact" {
		t.Errorf("rewrite and redact: %s args %s %+v %+v", j.State, j.Args, j.Result, j.Hooks)
	}
	if got, _ := h.svc.Get(t.Context(), "rewrite", j.ID); len(got.Hooks) != 2 || string(got.Args) != `{"a":10,"b":20}` {
		t.Errorf("stored: %s %+v", got.Args, got.Hooks)
	}
	if j := run("rewrite", `{"a":2,"b":2}`); j.State != job.StateFailed || !strings.Contains(j.Result.Error, "rewritten arguments are invalid") {
		t.Errorf("invalid rewrite: %s %+v", j.State, j.Result)
	}
	start := time.Now()
	if j := run("closed", `{"a":1,"b":2}`); j.State != job.StateFailed || !strings.Contains(j.Result.Error, "fails closed") ||
		j.Hooks[0].Outcome != "error" || !strings.Contains(j.Hooks[0].Error, "timed out") || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("timeout, fail closed: %s %+v %+v", j.State, j.Result, j.Hooks)
	}
	if j := run("open", `{"a":1,"b":2}`); j.State != job.StateSucceeded || j.Result.Content != "3" || j.Hooks[0].Outcome != "error" {
		t.Errorf("timeout, fail open: %s %+v %+v", j.State, j.Result, j.Hooks)
	}
	if j := run("guarded", `{"a":1,"b":2}`); j.State != job.StateFailed || !strings.Contains(j.Hooks[0].Error, "address guard") {
		t.Errorf("a hook on a refused address: %s %+v", j.State, j.Hooks)
	}
	if j := run("acme", `{"a":1,"b":2}`); len(j.Hooks) != 0 || j.Result.Content != "3" {
		t.Errorf("a tenant without hooks: %+v", j.Hooks)
	}
	if n := badSig.Load(); n != 0 { // the guarded tenant's hook never connected
		t.Errorf("%d hook requests without a valid signature", n)
	}
}
