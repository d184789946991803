//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestToolHooks: hooks configured per tenant and tool glob against a hook
// server this test starts on loopback (allowed by the hooks'
// allow_private_cidrs): a before hook denies a call, one rewrites the
// arguments, one times out under fail-closed; an after hook redacts
// bash's output; the outcomes are on the job; a call the guard's own rule
// denies never reaches a hook; requests are signed with the secret.
func TestToolHooks(t *testing.T) {
	var calls, badSig atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if (delivery{ts: r.Header.Get("X-Sandboxd-Timestamp"), sig: r.Header.Get("X-Sandboxd-Signature"), body: body}).verify("hook-key") != nil {
			badSig.Add(1)
		}
		var c struct {
			Tool      string            `json:"tool"`
			Arguments map[string]string `json:"arguments"`
			Effects   []string          `json:"effects"`
			Result    *struct {
				Content string `json:"content"`
			} `json:"result"`
		}
		_ = json.Unmarshal(body, &c)
		switch r.URL.Path {
		case "/before":
			switch expr := c.Arguments["expression"]; {
			case strings.Contains(expr, "666"):
				fmt.Fprint(w, `{"action":"deny","reason":"that number is not allowed"}`)
			case expr == "2+2":
				fmt.Fprint(w, `{"action":"allow","arguments":{"expression":"3+3"}}`)
			default:
				fmt.Fprint(w, `{"action":"allow"}`)
			}
		case "/after":
			if c.Result != nil && strings.Contains(c.Result.Content, "s3cr3t") {
				fmt.Fprintf(w, `{"content":%q}`, strings.ReplaceAll(c.Result.Content, "s3cr3t", "[REDACTED]"))
			}
		case "/slow":
			time.Sleep(3 * time.Second)
		}
	}))
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	s := startServer(t, fmt.Sprintf(`
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      rules:
        - tool: write_file
          action: deny
          reason: no writes
  - name: slowco
    api_keys: [k-slow]
hooks:
  - tenant: acme
    tools: "calc*"
    before: %[1]s/before
    secret: hook-key
    allow_private_cidrs: [127.0.0.1/32]
  - tenant: acme
    tools: "bash"
    after: %[1]s/after
    secret: hook-key
    allow_private_cidrs: [127.0.0.1/32]
  - tenant: acme
    tools: "write_*"
    before: %[1]s/before
    secret: hook-key
    allow_private_cidrs: [127.0.0.1/32]
  - tenant: slowco
    tools: "*"
    before: %[1]s/slow
    timeout: 500ms
    secret: hook-key
    allow_private_cidrs: [127.0.0.1/32]
`, srv.URL))

	type hookRec struct {
		Phase, Outcome, Reason, Error string
	}
	get := func(key, id string) (j struct {
		State     string          `json:"state"`
		Arguments json.RawMessage `json:"arguments"`
		Hooks     []hookRec       `json:"hooks"`
	}) {
		s.do("GET", "/v1/jobs/"+id, key, nil, &j)
		return j
	}

	if j := s.run("k-acme", "calculator", map[string]any{"expression": "666*2"}); j.State != "failed" ||
		!strings.Contains(j.Result.Error, "refused by hook: that number is not allowed") {
		t.Errorf("deny: %+v", j.Result)
	} else if g := get("k-acme", j.ID); len(g.Hooks) != 1 || g.Hooks[0].Outcome != "deny" {
		t.Errorf("deny recorded: %+v", g.Hooks)
	}
	j := s.run("k-acme", "calculator", map[string]any{"expression": "2+2"})
	if j.State != "succeeded" || j.Result.Content != "6" {
		t.Errorf("rewrite: %+v", j.Result)
	}
	if g := get("k-acme", j.ID); string(g.Arguments) != `{"expression":"3+3"}` || len(g.Hooks) != 1 || g.Hooks[0].Outcome != "rewrite" {
		t.Errorf("rewrite recorded: %s %+v", g.Arguments, g.Hooks)
	}
	b := s.run("k-acme", "bash", map[string]any{"command": "echo the password is s3cr3t"})
	if b.State != "succeeded" || strings.Contains(b.Result.Content, "s3cr3t") || !strings.Contains(b.Result.Content, "the password is [REDACTED]") ||
		(b.Result.Process != nil && strings.Contains(b.Result.Process.Stdout, "s3cr3t")) {
		t.Errorf("after hook redaction: %q %+v", b.Result.Content, b.Result.Process)
	}
	if g := get("k-acme", b.ID); len(g.Hooks) != 1 || g.Hooks[0].Phase != "after" || g.Hooks[0].Outcome != "redact" {
		t.Errorf("redaction recorded: %+v", g.Hooks)
	}
	// The guard's own deny rule runs first: the hook is never asked.
	n := calls.Load()
	if w := s.run("k-acme", "write_file", map[string]any{"path": "x", "content": "y"}); w.Reason != "denied" || calls.Load() != n {
		t.Errorf("a call the guard denies reached a hook (%d requests): %+v", calls.Load()-n, w)
	}
	start := time.Now()
	if j := s.run("k-slow", "calculator", map[string]any{"expression": "1+1"}); j.State != "failed" || !strings.Contains(j.Result.Error, "fails closed") {
		t.Errorf("timeout under fail-closed: %+v", j.Result)
	} else if g := get("k-slow", j.ID); len(g.Hooks) != 1 || g.Hooks[0].Outcome != "error" || !strings.Contains(g.Hooks[0].Error, "timed out") {
		t.Errorf("timeout recorded: %+v", g.Hooks)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("the timed-out call took %s (timeout 500ms)", d)
	}
	if n := badSig.Load(); n != 0 {
		t.Errorf("%d hook requests were not signed with the hook's secret", n)
	}
}
