//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// forwardConfig gives the replicas their shared forwarding secret.
const forwardConfig = "replica_secret: it-secret-0123456789abcdef0123456789\n"

func startForwardingReplicas(t testing.TB, dsn string, n int, lease string) []*server {
	var rs []*server
	for i := range n {
		rs = append(rs, startServerArgs(t, forwardConfig, "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1), "--replica-lease", lease))
	}
	return rs
}

func (s *server) repl(sid, code string) (int, jobView, []byte) {
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "python_repl",
		"arguments": map[string]any{"code": code}, "session_id": sid}, &j)
	return resp.StatusCode, j, data
}

// A session created on r1 and used through r2: python_repl keeps its
// globals across the two replicas, files go in and out through r2, a
// forged forward is refused, a job claimed by one replica is cancelled
// through another, and once r1 is killed its session answers as lost on
// r2 (503 while r1's lease lasts, never a 502). The lease is 6 s: on this
// loaded 2-core machine a 2 s one was lost to slow renewals.
func TestReplicasForwardSession(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rs := startForwardingReplicas(t, dsn, 3, "6s")
	a, b := rs[0], rs[1]
	var sess sessionView
	if resp, data := a.do("POST", "/v1/sessions", "", map[string]any{"ttl_seconds": 600}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create session on r1: %d %s", resp.StatusCode, data)
	}
	if code, j, data := a.repl(sess.ID, "x = 41"); code != 200 || j.State != "succeeded" {
		t.Fatalf("x = 41 on r1: %d %s", code, data)
	}
	code, j, data := b.repl(sess.ID, "x + 1")
	if code != 200 || j.State != "succeeded" || !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("x + 1 through r2: %d %s", code, data)
	}

	// Files through r2 land in r1's workspace.
	req, _ := http.NewRequest("PUT", b.URL+"/v1/sessions/"+sess.ID+"/files/note.txt", strings.NewReader("via r2\n"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT through r2: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, j, data := a.repl(sess.ID, "open('note.txt').read()"); code != 200 || !strings.Contains(j.Result.Content, "via r2") {
		t.Fatalf("the file on r1: %d %s", code, data)
	}
	if resp, data := rs[2].do("GET", "/v1/sessions/"+sess.ID+"/files/note.txt", "", nil, nil); resp.StatusCode != 200 || string(data) != "via r2\n" {
		t.Fatalf("GET through r3: %d %q", resp.StatusCode, data)
	}
	// Events of the session's job through r2 (SSE from the owner).
	if resp, data := b.do("GET", "/v1/jobs/"+j.ID+"/events", "", nil, nil); resp.StatusCode != 200 || !strings.Contains(string(data), "event: finished") {
		t.Fatalf("events through r2: %d %s", resp.StatusCode, data)
	}

	// A forged forward to r1 (a client's own envelope) is refused.
	forged, _ := http.NewRequest("GET", a.URL+"/v1/sessions/"+sess.ID+"/files/note.txt", nil)
	for k, v := range map[string]string{"X-Sandboxd-Forward": "v1", "X-Sandboxd-Forward-From": "r2", "X-Sandboxd-Forward-To": "r1",
		"X-Sandboxd-Forward-Time": fmt.Sprint(time.Now().UnixNano()), "X-Sandboxd-Forward-Nonce": strings.Repeat("ab", 16),
		"X-Sandboxd-Forward-Tenant": "default", "X-Sandboxd-Forward-Operator": "1", "X-Sandboxd-Forward-Body": "none",
		"X-Sandboxd-Forward-Signature": strings.Repeat("0", 64)} {
		forged.Header.Set(k, v)
	}
	resp, err = http.DefaultClient.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("a forged forward: %d, want 401", resp.StatusCode)
	}

	// A one-shot job claimed by some replica, cancelled through another.
	code, long := submitRaw(a.URL, map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 60"}})
	if code/100 != 2 {
		t.Fatalf("submit the long job: %d", code)
	}
	owner := ""
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for owner == "" {
		var state string
		if err := conn.QueryRow(t.Context(), `SELECT owner, state FROM jobs WHERE id = $1`, long.ID).Scan(&owner, &state); err != nil {
			t.Fatal(err)
		}
		if state != "running" {
			owner = ""
		}
		if time.Now().After(deadline) {
			t.Fatal("the long job never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	other := rs[0]
	if owner == "r1" {
		other = rs[1]
	}
	var cancelled jobView
	if resp, data := other.do("POST", "/v1/jobs/"+long.ID+"/cancel", "", nil, &cancelled); resp.StatusCode != 200 || cancelled.State != "cancelled" {
		t.Fatalf("cancel through a replica other than its owner %s: %d %s", owner, resp.StatusCode, data)
	}

	// r1 killed: through r2 its session is unavailable while r1's lease
	// lasts, then lost (closed by the takeover).
	a.stop(syscall.SIGKILL)
	deadline = time.Now().Add(time.Minute)
	seen := map[int]int{}
	for {
		code, _, data := b.repl(sess.ID, "x")
		seen[code]++
		if code == 502 || code == 500 {
			t.Fatalf("the dead owner's session through r2: %d %s", code, data)
		}
		var now sessionView
		b.do("GET", "/v1/sessions/"+sess.ID, "", nil, &now)
		if now.State == "closed" && now.Reason == "lost" && code == 409 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session after r1 died: %+v, last submit %d %s", now, code, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("answers through r2 while r1 died: %v", seen)
}

// switchTransport sends every request to the host it is switched to.
type switchTransport struct{ host atomic.Pointer[string] }

func (s *switchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host = *s.host.Load()
	r.Host = r.URL.Host
	return http.DefaultTransport.RoundTrip(r)
}

// An MCP session initialized on r1 whose calls then go to r2 reaches its
// sandbox on r1: python_repl keeps x.
func TestReplicasForwardMCP(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rs := startForwardingReplicas(t, dsn, 2, "15s")
	ua, _ := url.Parse(rs[0].URL)
	ub, _ := url.Parse(rs[1].URL)
	tr := &switchTransport{}
	tr.host.Store(&ua.Host)
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: rs[0].URL + "/mcp", HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(code string) string {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": code}})
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		if r.IsError || len(r.Content) == 0 {
			t.Fatalf("%s: %+v", code, r)
		}
		return r.Content[0].(*mcp.TextContent).Text
	}
	call("x = 41")
	tr.host.Store(&ub.Host)
	if got := call("x + 1"); !strings.Contains(got, "42") {
		t.Fatalf("x + 1 through r2: %q", got)
	}
}

// BenchmarkReplicaForward runs a warm python_repl call ({"code": "1+1"})
// of one session on r1, side by side in one run, alternating call by
// call: direct (POST /v1/jobs?wait=true to r1) and forwarded (the same to
// r2, which forwards it to r1), and reports each one's p50-ms and the
// forwarded-minus-direct-p50-ms (the goal is at most 0.5 ms).
func BenchmarkReplicaForward(b *testing.B) {
	pg := pgtest.Start(b)
	dsn := pg.NewDatabase(b)
	rs := startForwardingReplicas(b, dsn, 2, "15s")
	var sess sessionView
	if resp, data := rs[0].do("POST", "/v1/sessions", "", map[string]any{"ttl_seconds": 3600}, &sess); resp.StatusCode != 201 {
		b.Fatalf("session: %d %s", resp.StatusCode, data)
	}
	hc := &http.Client{}
	body, _ := json.Marshal(map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": "1+1"}, "session_id": sess.ID})
	callOn := func(s *server) error {
		req, _ := http.NewRequest("POST", s.URL+"/v1/jobs?wait=true", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var j jobView
		if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
			return err
		}
		if resp.StatusCode != 200 || j.Result == nil || !strings.Contains(j.Result.Content, "2") {
			return fmt.Errorf("%d %+v", resp.StatusCode, j.Result)
		}
		return nil
	}
	for range 5 {
		if err := callOn(rs[0]); err != nil {
			b.Fatal(err)
		}
		if err := callOn(rs[1]); err != nil {
			b.Fatal(err)
		}
	}
	var direct, fwd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, k := range order {
			start := time.Now()
			if err := callOn(rs[k]); err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				direct = append(direct, time.Since(start))
			} else {
				fwd = append(fwd, time.Since(start))
			}
		}
	}
	b.StopTimer()
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(direct, 0.5), "direct-p50-ms")
	b.ReportMetric(p(fwd, 0.5), "forwarded-p50-ms")
	b.ReportMetric(p(direct, 0.99), "direct-p99-ms")
	b.ReportMetric(p(fwd, 0.99), "forwarded-p99-ms")
	b.ReportMetric(p(fwd, 0.5)-p(direct, 0.5), "forwarded-minus-direct-p50-ms")
}

// A call waiting for approval on r1 is approved through r2 and runs (on
// r1, which holds it); another, cancelled through r2, ends cancelled.
func TestReplicasForwardApproval(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	cfg := forwardConfig + "tenants:\n  - name: acme\n    api_keys: [k-acme]\n    policy:\n      default: allow\n" +
		"      rules:\n        - tool: bash\n          action: confirm\n          reason: a human looks first\n" +
		// a budget: the pending job is inserted with its spend (the shared guard)
		"      budgets:\n        - effect: exec\n          limit: 100\n          per: 1h\n"
	var rs []*server
	for i := range 2 {
		rs = append(rs, startServerArgs(t, cfg, "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1), "--replica-lease", "6s"))
	}
	a, b := rs[0], rs[1]
	pending := func(cmd string) (jobView, string) {
		var j jobView
		resp, data := a.do("POST", "/v1/jobs", "k-acme", map[string]any{"tool": "bash", "arguments": map[string]any{"command": cmd}}, &j)
		if resp.StatusCode != 202 || j.State != "pending_approval" {
			t.Fatalf("submit on r1: %d %s", resp.StatusCode, data)
		}
		var list struct {
			Approvals []struct {
				ID    string `json:"id"`
				JobID string `json:"job_id"`
			} `json:"approvals"`
		}
		b.do("GET", "/v1/approvals?state=pending", "k-acme", nil, &list)
		for _, ap := range list.Approvals {
			if ap.JobID == j.ID {
				return j, ap.ID
			}
		}
		t.Fatalf("no pending approval of %s listed on r2: %+v", j.ID, list)
		return j, ""
	}
	j, apr := pending("echo approved")
	if resp, data := b.do("POST", "/v1/approvals/"+apr, "k-acme", map[string]any{"decision": "approve"}, nil); resp.StatusCode != 200 {
		t.Fatalf("approve through r2: %d %s", resp.StatusCode, data)
	}
	var done jobView
	if resp, data := b.do("GET", "/v1/jobs/"+j.ID+"?wait=true", "k-acme", nil, &done); resp.StatusCode != 200 || done.State != "succeeded" || !strings.Contains(done.Result.Content, "approved") {
		t.Fatalf("the approved job through r2: %d %s", resp.StatusCode, data)
	}
	j2, _ := pending("echo never")
	var c jobView
	if resp, data := b.do("POST", "/v1/jobs/"+j2.ID+"/cancel", "k-acme", nil, &c); resp.StatusCode != 200 || c.State != "cancelled" {
		t.Fatalf("cancel of r1's pending job through r2: %d %s", resp.StatusCode, data)
	}
}

// SSE through a replica for a job no replica had claimed when the stream
// began (every worker busy): the stream follows the job wherever it runs
// and ends with its finished event.
func TestReplicasEventsOfQueuedJob(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	var rs []*server
	for i := range 2 {
		rs = append(rs, startServerArgs(t, forwardConfig+"queue:\n  workers: 1\n", "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1), "--replica-lease", "6s"))
	}
	for i := range 2 { // both workers busy for a while
		if code, _ := submitRaw(rs[i].URL, map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 3"}}); code/100 != 2 {
			t.Fatalf("blocker %d: %d", i, code)
		}
	}
	time.Sleep(500 * time.Millisecond)
	code, j := submitRaw(rs[0].URL, map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo from-the-queue"}})
	if code/100 != 2 {
		t.Fatalf("submit: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", rs[1].URL+"/v1/jobs/"+j.ID+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(data), "event: finished") || !strings.Contains(string(data), "from-the-queue") {
		t.Fatalf("events through r2 of a job queued when the stream began: %v\n%s", err, data)
	}
}
