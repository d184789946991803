package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// fakeTurns answers every call with "ran <tool>"; a call of "confirm"
// holds its batch until release is closed.
type fakeTurns struct {
	mu      sync.Mutex
	batches map[string]*job.Batch
	done    map[string]chan struct{}
	release chan struct{}
	last    job.TurnRequest
}

func newFakeTurns() *fakeTurns {
	return &fakeTurns{batches: map[string]*job.Batch{}, done: map[string]chan struct{}{}, release: make(chan struct{})}
}

func (f *fakeTurns) Submit(_ context.Context, tenant string, req job.TurnRequest) (*job.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = req
	id := "tc_" + string(rune('a'+len(f.batches)))
	b := &job.Batch{ID: id, Tenant: tenant, Dialect: req.Turn.Dialect, Mode: job.ModeParallel, State: job.BatchCompleted,
		FinalAnswer: req.Turn.FinalAnswer, HasFinal: req.Turn.HasFinal, Effects: map[tools.Effect]int{}, CreatedAt: time.Now()}
	hold := false
	for _, c := range req.Turn.Calls {
		rec := job.CallRecord{CallID: c.ID, GeneratedID: c.GeneratedID, Tool: c.Name, State: "succeeded", OK: true, Answer: "ran " + c.Name}
		if c.Problem != nil {
			rec = job.CallRecord{CallID: c.ID, State: job.CallInvalid, Answer: tools.ProblemText("", c.Problem), IsError: true}
		}
		if c.Name == "guarded" { // decided by a policy, with nothing remaining to report
			rec.Guard = &job.GuardRecord{Outcome: "allow", Rule: "rules[0]", DecidedAt: time.Now()}
		}
		if c.Name == "confirm" {
			hold = true
			rec.State = "pending_approval"
		}
		b.Calls = append(b.Calls, rec)
	}
	done := make(chan struct{})
	if hold {
		b.State = job.BatchPendingApproval
		go func() {
			<-f.release
			f.mu.Lock()
			b.State = job.BatchCompleted
			for i := range b.Calls {
				b.Calls[i].State = "succeeded"
			}
			f.mu.Unlock()
			close(done)
		}()
	} else {
		close(done)
	}
	f.batches[id], f.done[id] = b, done
	c := *b
	return &c, nil
}

func (f *fakeTurns) Get(_ context.Context, tenant, id string) (*job.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches[id]
	if b == nil || b.Tenant != tenant {
		return nil, job.ErrBatchNotFound
	}
	c := *b
	c.Calls = append([]job.CallRecord(nil), b.Calls...)
	return &c, nil
}

func (f *fakeTurns) Wait(ctx context.Context, tenant, id string) (*job.Batch, error) {
	f.mu.Lock()
	done := f.done[id]
	f.mu.Unlock()
	if done == nil {
		return nil, job.ErrBatchNotFound
	}
	select {
	case <-done:
	case <-ctx.Done():
		b, _ := f.Get(ctx, tenant, id)
		return b, ctx.Err()
	}
	return f.Get(ctx, tenant, id)
}

func TestTurnsDialects(t *testing.T) {
	t.Parallel()
	ft := newFakeTurns()
	h := newHarness(t, Options{Turns: ft})
	tests := []struct {
		name, body string
		want       string // a substring of the answer
	}{
		{"openai chat", `{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{}"}}]}`,
			`"messages":[{"content":"ran echo","role":"tool","tool_call_id":"call_1"}]`},
		{"openai responses", `[{"type":"function_call","call_id":"call_2","name":"echo","arguments":"{}"}]`,
			`"messages":[{"call_id":"call_2","output":"ran echo","type":"function_call_output"}]`},
		{"anthropic", `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"echo","input":{}}]}`,
			`"messages":[{"content":[{"content":"ran echo","is_error":false,"tool_use_id":"toolu_1","type":"tool_result"}],"role":"user"}]`},
		{"react", `{"text":"Thought: go\nAction: echo\nAction Input: {}"}`, `"text":"Observation: ran echo"`},
		{"react final", `{"text":"Final Answer: 7"}`, `"final_answer":"7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(http.MethodPost, "/v1/tool-calls", tt.body)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tt.want) {
				t.Fatalf("%d %s\nwant %s", rec.Code, rec.Body.String(), tt.want)
			}
			if loc := rec.Header().Get("Location"); !strings.HasPrefix(loc, "/v1/tool-calls/tc_") {
				t.Errorf("Location %q", loc)
			}
		})
	}
}

// A call's guard decision is a GuardDecision as on a job (remaining and
// refunded present even when empty); h.do checks the answer against the
// document.
func TestTurnsGuardMatchesSchema(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Turns: newFakeTurns()})
	rec := h.do(http.MethodPost, "/v1/tool-calls", `[{"type":"function_call","call_id":"c1","name":"guarded","arguments":"{}"}]`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"remaining":[]`) || !strings.Contains(rec.Body.String(), `"refunded":false`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

func TestTurnsPlainTextAndSession(t *testing.T) {
	t.Parallel()
	ft := newFakeTurns()
	h := newHarness(t, Options{Turns: ft})
	rec, _ := h.serve(http.MethodPost, "/v1/tool-calls?session_id=ses_1", "Thought: x\nAction: echo\nAction Input: hi", "Content-Type: text/plain", "Idempotency-Key: k1")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"dialect":"react"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if ft.last.SessionID != "ses_1" || ft.last.IdempotencyKey != "k1" {
		t.Errorf("request %+v", ft.last)
	}
	rec = h.do(http.MethodPost, "/v1/tool-calls?session_id=ses_1", `{"session_id":"ses_2","text":"Final Answer: 1"}`)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("conflicting session ids: %d", rec.Code)
	}
}

func TestTurnsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Turns: newFakeTurns()})
	for _, body := range []string{`[]`, `{"foo":1}`, `[{"type":"tool_use","name":"a","input":{}},{"type":"function_call","name":"b"}]`} {
		rec := h.do(http.MethodPost, "/v1/tool-calls", body)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body.String())
		}
	}
	rec := h.do(http.MethodGet, "/v1/tool-calls/tc_nope", "")
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "batch not found") {
		t.Errorf("unknown batch: %d %s", rec.Code, rec.Body.String())
	}
}

func TestTurnsApprovalAnswers202(t *testing.T) {
	t.Parallel()
	ft := newFakeTurns()
	h := newHarness(t, Options{Turns: ft})
	rec := h.do(http.MethodPost, "/v1/tool-calls", `[{"type":"tool_use","id":"t1","name":"confirm","input":{}},{"type":"tool_use","id":"t2","name":"echo","input":{}}]`)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	var b struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Messages []any  `json:"messages"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.State != "pending_approval" || b.Messages != nil {
		t.Fatalf("%+v %v", b, err)
	}
	// A short wait elapses: still 202.
	if rec := h.do(http.MethodGet, "/v1/tool-calls/"+b.ID+"?wait=10ms", ""); rec.Code != http.StatusAccepted {
		t.Errorf("wait elapsed: %d", rec.Code)
	}
	close(ft.release)
	rec = h.do(http.MethodGet, "/v1/tool-calls/"+b.ID+"?wait=5s", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"tool_use_id":"t2"`) {
		t.Errorf("released: %d %s", rec.Code, rec.Body.String())
	}
}

// FuzzTurnsBody: no body crashes the handler or gets a 5xx.
func FuzzTurnsBody(f *testing.F) {
	f.Add(`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"e","arguments":"{"}}]}`)
	f.Add("Action: x\nAction Input: y")
	f.Add(`[{"type":"function_call","call_id":1}]`)
	h := &harness{h: New(nil, Options{Turns: newFakeTurns()})}
	f.Fuzz(func(t *testing.T, body string) {
		h.t = t
		rec, _ := h.serve(http.MethodPost, "/v1/tool-calls", body)
		if rec.Code >= 500 {
			t.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
	})
}

type fakeSources struct{ reloads int }

func (f *fakeSources) Sources() []tools.SourceStatus {
	return []tools.SourceStatus{{Name: "d", Kind: "directory", State: "loaded", Tools: []string{}}}
}
func (f *fakeSources) Reload(context.Context) (tools.SourceStatus, error) {
	f.reloads++
	return tools.SourceStatus{Name: "d", Kind: "directory", State: "loaded", Tools: []string{"x"}}, nil
}
func (f *fakeSources) Warm(context.Context) {}

// Turns are a tenant's; reloading the tools directory is the operator's.
func TestTurnsAndAdminAuth(t *testing.T) {
	t.Parallel()
	src := &fakeSources{}
	h := newHarness(t, Options{Turns: newFakeTurns(), Tools: src, Keys: map[string]string{"k-acme": "acme"}, OperatorKeys: []string{"k-op"}})
	if rec := h.do(http.MethodPost, "/v1/admin/tools/reload", "", "Authorization: Bearer k-acme"); rec.Code != http.StatusForbidden {
		t.Errorf("tenant reload: %d %s", rec.Code, rec.Body.String())
	}
	if rec := h.do(http.MethodPost, "/v1/admin/tools/reload", "", "Authorization: Bearer k-op"); rec.Code != http.StatusOK || src.reloads != 1 {
		t.Errorf("operator reload: %d %s", rec.Code, rec.Body.String())
	}
	body := `[{"type":"tool_use","id":"t","name":"echo","input":{}}]`
	if rec := h.do(http.MethodPost, "/v1/tool-calls", body, "Authorization: Bearer k-op"); rec.Code != http.StatusForbidden {
		t.Errorf("operator turn: %d", rec.Code)
	}
	if rec := h.do(http.MethodPost, "/v1/tool-calls", body, "Authorization: Bearer k-acme"); rec.Code != http.StatusOK {
		t.Errorf("tenant turn: %d %s", rec.Code, rec.Body.String())
	}
	if rec := h.do(http.MethodGet, "/v1/tools", "", "Authorization: Bearer k-acme"); !strings.Contains(rec.Body.String(), `"sources":[{"name":"d"`) {
		t.Errorf("sources not listed: %s", rec.Body.String())
	}
}
