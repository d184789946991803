package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

func decodeJob(t *testing.T, body string) jobView {
	t.Helper()
	var j jobView
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatalf("decode job %q: %v", body, err)
	}
	return j
}

func decodeErr(t *testing.T, body string) errorPayload {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("decode error %q: %v", body, err)
	}
	return e.Error
}

func okResult(content string) *tools.Result {
	return &tools.Result{OK: true, Content: content, Usage: tools.Usage{WallMS: 3}}
}

func TestHealthzOpenAPI(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Dashboard: reg, Registerer: reg, Version: "v1.2.3", Keys: map[string]string{"k": "a"}})

	rec := h.do("GET", "/healthz", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"status":"ok"`) || !strings.Contains(rec.Body.String(), "v1.2.3") {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	rec = h.do("GET", "/openapi.yaml", "")
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), "openapi: 3.0.3") {
		t.Fatalf("openapi.yaml: %d", rec.Code)
	}
	// /metrics is the metrics listener's (metrics_addr), never the API's.
	if rec, _ := h.serve("GET", "/metrics", ""); rec.Code != 404 {
		t.Fatalf("GET /metrics on the API: %d", rec.Code)
	}
}

// dashboardRegistry has samples of tenants a and b and a server-wide one.
func dashboardRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_jobs_total", Help: "h"}, []string{"tenant", "tool"})
	jobs.WithLabelValues("a", "echo").Add(3)
	jobs.WithLabelValues("b", "echo").Add(5)
	budget := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandboxd_guard_budget_remaining", Help: "h"}, []string{"tenant"})
	budget.WithLabelValues("b").Set(7)
	queue := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxd_queue_depth", Help: "h"})
	queue.Set(2)
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_other", Help: "h"})
	reg.MustRegister(jobs, budget, queue, other)
	return reg
}

// GET /v1/dashboard: a tenant sees only its own samples, the operator every
// tenant's and the server-wide ones, nobody without a key.
func TestDashboardScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Dashboard: dashboardRegistry(t), Keys: map[string]string{"key-a": "a", "key-b": "b"}, OperatorKeys: []string{"key-op"}})
	if rec := h.do("GET", "/v1/dashboard", ""); rec.Code != 401 {
		t.Fatalf("no key: %d", rec.Code)
	}
	for _, tc := range []struct {
		key, scope string
		want, not  []string
	}{
		{"key-a", "tenant a", []string{`sandboxd_jobs_total{tenant="a",tool="echo"} 3`},
			[]string{`tenant="b"`, "sandboxd_queue_depth", "sandboxd_guard_budget_remaining", "go_other"}},
		{"key-b", "tenant b", []string{`sandboxd_jobs_total{tenant="b",tool="echo"} 5`, `sandboxd_guard_budget_remaining{tenant="b"} 7`},
			[]string{`tenant="a"`, "sandboxd_queue_depth", "go_other"}},
		{"key-op", "operator", []string{`sandboxd_jobs_total{tenant="a",tool="echo"} 3`, `sandboxd_jobs_total{tenant="b",tool="echo"} 5`, "sandboxd_queue_depth 2"},
			[]string{"go_other"}},
	} {
		rec := h.do("GET", "/v1/dashboard", "", "Authorization: Bearer "+tc.key)
		body := rec.Body.String()
		if rec.Code != 200 || rec.Header().Get("X-Sandboxd-Scope") != tc.scope || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Fatalf("%s: %d scope %q type %q\n%s", tc.key, rec.Code, rec.Header().Get("X-Sandboxd-Scope"), rec.Header().Get("Content-Type"), body)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: no %s in\n%s", tc.key, w, body)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(body, n) {
				t.Errorf("%s sees %s:\n%s", tc.key, n, body)
			}
		}
	}
	// Without keys the single tenant is the operator: it sees everything.
	h = newHarness(t, Options{Dashboard: dashboardRegistry(t)})
	if rec := h.do("GET", "/v1/dashboard", ""); rec.Code != 200 || rec.Header().Get("X-Sandboxd-Scope") != "operator" {
		t.Fatalf("no keys: %d %q", rec.Code, rec.Header().Get("X-Sandboxd-Scope"))
	}
}

// An operator key is no tenant: it runs no jobs, cancels none and opens
// no sessions; it reads every tenant's jobs.
func TestOperatorKeyIsNoTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Keys: map[string]string{"key-a": "a", "key-b": "b"}, OperatorKeys: []string{"key-op"}})
	ja := h.submit(`{"tool":"echo","arguments":{"text":"a"}}`, "X-API-Key: key-a")
	jb := h.submit(`{"tool":"echo","arguments":{"text":"b"}}`, "X-API-Key: key-b")
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/jobs", `{"tool":"echo","arguments":{"text":"hi"}}`},
		{"POST", "/v1/jobs/" + ja + "/cancel", ""},
	} {
		rec := h.do(r.method, r.path, r.body, "X-API-Key: key-op")
		if rec.Code != 403 || decodeErr(t, rec.Body.String()).Code != CodeForbidden {
			t.Errorf("operator %s %s: %d %s", r.method, r.path, rec.Code, rec.Body)
		}
	}
	if rec := h.do("GET", "/v1/tools", "", "X-API-Key: key-op"); rec.Code != 200 {
		t.Errorf("operator GET /v1/tools: %d", rec.Code)
	}
	list := func(key, query string) (int, []string) {
		rec := h.do("GET", "/v1/jobs"+query, "", "X-API-Key: "+key)
		var l jobList
		_ = json.Unmarshal(rec.Body.Bytes(), &l)
		var ids []string
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
		}
		return rec.Code, ids
	}
	if code, ids := list("key-op", ""); code != 200 || fmt.Sprint(ids) != fmt.Sprint([]string{jb, ja}) {
		t.Errorf("operator GET /v1/jobs: %d %v, want both tenants' newest first", code, ids)
	}
	if code, ids := list("key-op", "?tenant=b"); code != 200 || fmt.Sprint(ids) != fmt.Sprint([]string{jb}) {
		t.Errorf("operator GET /v1/jobs?tenant=b: %d %v", code, ids)
	}
	if code, ids := list("key-a", ""); code != 200 || fmt.Sprint(ids) != fmt.Sprint([]string{ja}) {
		t.Errorf("tenant a GET /v1/jobs: %d %v", code, ids)
	}
	if code, _ := list("key-a", "?tenant=b"); code != 403 {
		t.Errorf("tenant a GET /v1/jobs?tenant=b: %d, want 403", code)
	}
	if code, ids := list("key-a", "?tenant=a"); code != 200 || len(ids) != 1 {
		t.Errorf("tenant a GET /v1/jobs?tenant=a: %d %v", code, ids)
	}
	for _, q := range []string{"?since=yesterday", "?until=2026-13-01T00:00:00Z", "?state=bogus"} {
		if code, _ := list("key-op", q); code != 400 {
			t.Errorf("GET /v1/jobs%s: %d, want 400", q, code)
		}
	}
	if rec := h.do("GET", "/v1/jobs/"+jb, "", "X-API-Key: key-op"); rec.Code != 200 {
		t.Errorf("operator GET a tenant's job: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", "/v1/jobs/"+jb, "", "X-API-Key: key-a"); rec.Code != 404 {
		t.Errorf("tenant a GET tenant b's job: %d, want 404", rec.Code)
	}
	if rec := h.do("GET", "/v1/jobs", "", "X-API-Key: key-a"); rec.Code != 200 {
		t.Errorf("tenant GET /v1/jobs: %d", rec.Code)
	}
}

func TestMetricsReuseRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a := newHarness(t, Options{Registerer: reg})
	b := newHarness(t, Options{Registerer: reg}) // same registry: no panic, shared counters
	a.do("GET", "/healthz", "")
	b.do("GET", "/healthz", "")
	if n := testutil.ToFloat64(mustCounter(t, reg)); n != 2 {
		t.Fatalf("healthz requests = %v, want 2", n)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	m := newHTTPMetrics(reg, nil)
	return m.requests.WithLabelValues("GET", "/healthz", "200")
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	rec := h.do("GET", "/healthz", "", "X-Request-ID: abc-123")
	if got := rec.Header().Get("X-Request-ID"); got != "abc-123" {
		t.Fatalf("echoed request id %q", got)
	}
	rec = h.do("GET", "/healthz", "", "X-Request-ID: "+strings.Repeat("x", 200))
	if got := rec.Header().Get("X-Request-ID"); !strings.HasPrefix(got, "req_") || len(got) != 30 {
		t.Fatalf("generated request id %q", got)
	}
	rec = h.do("GET", "/v1/jobs/missing", "", "X-Request-ID: rid-1")
	if e := decodeErr(t, rec.Body.String()); e.RequestID != "rid-1" {
		t.Fatalf("error body request_id %q", e.RequestID)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Keys: map[string]string{"key-alice": "alice", "key-bob": "bob"}})
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"missing", nil, 401},
		{"unknown bearer", []string{"Authorization: Bearer nope"}, 401},
		{"wrong scheme", []string{"Authorization: Basic key-alice"}, 401},
		{"prefix of a key", []string{"X-API-Key: key-al"}, 401},
		{"bearer", []string{"Authorization: Bearer key-alice"}, 200},
		{"bearer lower-case scheme", []string{"Authorization: bearer key-alice"}, 200},
		{"x-api-key", []string{"X-API-Key: key-bob"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := h.do("GET", "/v1/jobs", "", tc.header...)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want == 401 {
				if e := decodeErr(t, rec.Body.String()); e.Code != CodeUnauthorized {
					t.Fatalf("code %q", e.Code)
				}
				if rec.Header().Get("WWW-Authenticate") == "" {
					t.Fatal("no WWW-Authenticate")
				}
			}
		})
	}
	// healthz needs no key.
	if rec := h.do("GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("healthz with keys: %d", rec.Code)
	}

	// Tenants are isolated.
	rec := h.do("POST", "/v1/jobs", `{"tool":"echo","arguments":{"text":"hi"}}`, "X-API-Key: key-alice")
	if rec.Code != 202 {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	j := decodeJob(t, rec.Body.String())
	if j.Tenant != "alice" {
		t.Fatalf("tenant %q", j.Tenant)
	}
	for _, path := range []string{"/v1/jobs/" + j.ID, "/v1/jobs/" + j.ID + "/events"} {
		if rec := h.do("GET", path, "", "X-API-Key: key-bob"); rec.Code != 404 {
			t.Fatalf("bob GET %s: %d", path, rec.Code)
		}
	}
	if rec := h.do("POST", "/v1/jobs/"+j.ID+"/cancel", "", "X-API-Key: key-bob"); rec.Code != 404 {
		t.Fatalf("bob cancel: %d", rec.Code)
	}
	rec = h.do("GET", "/v1/jobs", "", "X-API-Key: key-bob")
	if strings.Contains(rec.Body.String(), j.ID) {
		t.Fatalf("bob lists alice's job: %s", rec.Body)
	}
	if rec := h.do("GET", "/v1/jobs/"+j.ID, "", "X-API-Key: key-alice"); rec.Code != 200 {
		t.Fatalf("alice GET: %d", rec.Code)
	}
}

func TestNoKeysDefaultTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	rec := h.do("POST", "/v1/jobs", `{"tool":"echo","arguments":{"text":"hi"}}`)
	if j := decodeJob(t, rec.Body.String()); rec.Code != 202 || j.Tenant != DefaultTenant {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
}

func TestGetListCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	var ids []string
	for i, tool := range []string{"a", "b", "a"} {
		rec := h.do("POST", "/v1/jobs", fmt.Sprintf(`{"tool":%q,"call_id":"c%d"}`, tool, i))
		ids = append(ids, decodeJob(t, rec.Body.String()).ID)
	}
	h.fake.Finish(ids[0], okResult("done"))

	rec := h.do("GET", "/v1/jobs/"+ids[0], "")
	if j := decodeJob(t, rec.Body.String()); rec.Code != 200 || j.State != wire.StateSucceeded {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", "/v1/jobs/job_404", ""); rec.Code != 404 || decodeErr(t, rec.Body.String()).Code != CodeNotFound {
		t.Fatalf("get missing: %d %s", rec.Code, rec.Body)
	}

	list := func(q string) jobList {
		t.Helper()
		rec := h.do("GET", "/v1/jobs"+q, "")
		if rec.Code != 200 {
			t.Fatalf("list %s: %d %s", q, rec.Code, rec.Body)
		}
		var l struct {
			Jobs       []jobView `json:"jobs"`
			NextCursor string    `json:"next_cursor"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out := jobList{NextCursor: l.NextCursor}
		for i := range l.Jobs {
			out.Jobs = append(out.Jobs, &l.Jobs[i])
		}
		return out
	}
	if l := list(""); len(l.Jobs) != 3 || l.Jobs[0].ID != ids[2] || l.NextCursor != "" {
		t.Fatalf("list all: %+v", l)
	}
	if l := list("?tool=a"); len(l.Jobs) != 2 {
		t.Fatalf("list tool=a: %d jobs", len(l.Jobs))
	}
	if l := list("?state=succeeded"); len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] {
		t.Fatalf("list state: %+v", l)
	}
	page := list("?limit=2")
	if len(page.Jobs) != 2 || page.NextCursor == "" {
		t.Fatalf("page 1: %+v", page)
	}
	if l := list("?limit=2&cursor=" + page.NextCursor); len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] {
		t.Fatalf("page 2: %+v", l)
	}
	for _, q := range []string{"?state=done", "?limit=0", "?limit=501", "?limit=x", "?cursor=bad"} {
		if rec := h.do("GET", "/v1/jobs"+q, ""); rec.Code != 400 {
			t.Fatalf("list %s: %d", q, rec.Code)
		}
	}

	rec = h.do("POST", "/v1/jobs/"+ids[1]+"/cancel", "")
	if j := decodeJob(t, rec.Body.String()); rec.Code != 200 || j.State != wire.StateCancelled || j.Reason != job.ReasonCancelled {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	rec = h.do("POST", "/v1/jobs/"+ids[0]+"/cancel", "")
	if j := decodeJob(t, rec.Body.String()); rec.Code != 200 || j.State != wire.StateSucceeded {
		t.Fatalf("cancel terminal: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/jobs/nope/cancel", ""); rec.Code != 404 {
		t.Fatalf("cancel missing: %d", rec.Code)
	}
}

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	rec, _ := h.serve("GET", "/v2/nothing", "")
	if rec.Code != 404 || decodeErr(t, rec.Body.String()).Code != CodeNotFound {
		t.Fatalf("unknown route: %d %s", rec.Code, rec.Body)
	}
	rec, _ = h.serve("DELETE", "/v1/jobs", "")
	if rec.Code != 405 || decodeErr(t, rec.Body.String()).Code != CodeMethodNotAllowed {
		t.Fatalf("wrong method: %d %s", rec.Code, rec.Body)
	}
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	max := time.Minute
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 0, false}, {"false", 0, false}, {"0", 0, false}, {"true", max, false},
		{"10s", 10 * time.Second, false}, {"2.5", 2500 * time.Millisecond, false},
		{"1h", max, false}, {"1e300", max, false}, {"NaN", 0, true}, {"+Inf", 0, true},
		{"-1", 0, true}, {"-1s", 0, true}, {"soon", 0, true},
	} {
		got, err := parseWait(tc.in, max)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseWait(%q) = %v, %v; want %v, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
