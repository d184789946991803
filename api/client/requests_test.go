package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api/client"
	"github.com/sandboxd/sandboxd/api/wire"
)

// TestRequests: what the client sends for the routes the fake service does
// not serve (the server's own tests and TestGoClient cover the answers):
// method, path, query, headers and body.
func TestRequests(t *testing.T) {
	t.Parallel()
	type req struct{ method, uri, body, idem, ctype, auth string }
	var mu sync.Mutex
	var got []req
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, req{r.Method, r.URL.RequestURI(), string(data), r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type"), r.Header.Get("Authorization")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/tool-calls"):
			io.WriteString(w, `{"id":"b1","state":"completed","dialect":"openai","mode":"parallel","calls":[],"effects":{},"messages":[{"role":"tool"}]}`)
		case strings.HasSuffix(r.URL.Path, "/archive"):
			io.WriteString(w, `{"entries":2}`)
		case r.URL.Path == "/v1/approvals":
			io.WriteString(w, `{"approvals":[{"id":"apr_1","state":"pending"}],"next_cursor":"c2"}`)
		case r.URL.Path == "/v1/sessions":
			if r.Method == http.MethodGet {
				io.WriteString(w, `{"sessions":[],"next_cursor":""}`)
				return
			}
			io.WriteString(w, `{"id":"ses_1","state":"active"}`)
		default:
			io.WriteString(w, `{"id":"x","state":"approved"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "k", nil)
	ctx := t.Context()

	if _, err := c.Submit(ctx, client.SubmitRequest{Tool: "echo", CallbackURL: "https://example.com/hook", Limits: &wire.Limits{TimeoutMS: 5}}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	tn, err := c.PostTurn(ctx, []byte(`{"role":"assistant"}`), client.TurnOptions{SessionID: "ses_1", IdempotencyKey: "t-1",
		CallbackURL: "https://example.com/turn", Wait: time.Second})
	if err != nil || !tn.Completed() || len(tn.Messages) != 1 || !strings.Contains(string(tn.Raw), `"mode":"parallel"`) {
		t.Fatalf("turn: %+v %v", tn, err)
	}
	if _, err := c.PostTurn(ctx, []byte("Thought: x"), client.TurnOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTurn(ctx, "b1", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if s, err := c.CreateSession(ctx, client.SessionRequest{Effects: []wire.Effect{"exec"}, TTLSeconds: 60}); err != nil || s.ID != "ses_1" {
		t.Fatalf("create session: %+v %v", s, err)
	}
	if _, _, err := c.ListSessions(ctx, client.SessionListOptions{State: "active", Limit: 5}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.PutArchive(ctx, "ses_1", "d ir", strings.NewReader("tar")); err != nil || n != 2 {
		t.Fatalf("put archive: %d %v", n, err)
	}
	if _, err := c.PutFile(ctx, "ses_1", "/a b/c.txt", strings.NewReader("hi")); err != nil {
		t.Fatal(err)
	}
	list, next, err := c.ListApprovals(ctx, client.ApprovalListOptions{State: "pending"})
	if err != nil || len(list) != 1 || list[0].ID != "apr_1" || next != "c2" {
		t.Fatalf("approvals: %+v %q %v", list, next, err)
	}
	if a, err := c.DecideApproval(ctx, "apr_1", true, "ok"); err != nil || a.State != "approved" {
		t.Fatalf("decide: %+v %v", a, err)
	}
	if _, err := c.DecideApproval(ctx, "apr_2", false, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.List(ctx, client.ListOptions{Session: "ses_1", Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}

	want := []req{
		{"POST", "/v1/jobs?wait=2s", `{"tool":"echo","limits":{"timeout_ms":5},"callback_url":"https://example.com/hook"}`, "", "application/json", "Bearer k"},
		{"POST", "/v1/tool-calls?callback_url=https%3A%2F%2Fexample.com%2Fturn&session_id=ses_1&wait=1s", `{"role":"assistant"}`, "t-1", "application/json", "Bearer k"},
		{"POST", "/v1/tool-calls", "Thought: x", "", "text/plain", "Bearer k"},
		{"GET", "/v1/tool-calls/b1?wait=3s", "", "", "", "Bearer k"},
		{"POST", "/v1/sessions", `{"effects":["exec"],"ttl_seconds":60}`, "", "application/json", "Bearer k"},
		{"GET", "/v1/sessions?limit=5&state=active", "", "", "", "Bearer k"},
		{"POST", "/v1/sessions/ses_1/archive?path=d+ir", "tar", "", "application/x-tar", "Bearer k"},
		{"PUT", "/v1/sessions/ses_1/files/a%20b/c.txt", "hi", "", "application/octet-stream", "Bearer k"},
		{"GET", "/v1/approvals?state=pending", "", "", "", "Bearer k"},
		{"POST", "/v1/approvals/apr_1", `{"decision":"approve","reason":"ok"}`, "", "application/json", "Bearer k"},
		{"POST", "/v1/approvals/apr_2", `{"decision":"deny"}`, "", "application/json", "Bearer k"},
		{"GET", "/v1/jobs?session=ses_1&since=2026-01-02T03%3A04%3A05Z", "", "", "", "Bearer k"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	var probe map[string]any
	if json.Unmarshal([]byte(got[0].body), &probe) != nil {
		t.Fatal("submit body is not JSON")
	}
}
