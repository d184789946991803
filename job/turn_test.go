package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// barrier is an in-process tool whose calls wait until n of them are in
// flight at once: in a parallel batch all of them meet, in a serial one
// the first waits alone until its timeout. A timing-independent proof of
// concurrency.
type barrier struct {
	mu    sync.Mutex
	n     int // calls that must be in flight together
	met   chan struct{}
	maxIn int
	in    int
}

func newBarrier(n int) *barrier { return &barrier{n: n, met: make(chan struct{})} }

func (b *barrier) tool(name string, parallel bool, wait time.Duration) *tools.Tool {
	return &tools.Tool{
		Name: name, ParallelSafe: parallel,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"i":{"type":"integer"}}}`),
		Run: func(ctx context.Context, _ tools.Env, _ map[string]any) (tools.Result, error) {
			b.mu.Lock()
			b.in++
			b.maxIn = max(b.maxIn, b.in)
			if b.in == b.n {
				close(b.met)
			}
			b.mu.Unlock()
			defer func() { b.mu.Lock(); b.in--; b.mu.Unlock() }()
			select {
			case <-b.met:
				return tools.Result{OK: true, Content: "met"}, nil
			case <-time.After(wait):
				return tools.Result{OK: true, Content: "alone"}, nil
			case <-ctx.Done():
				return tools.Result{}, ctx.Err()
			}
		},
	}
}

func (h *harness) register(t testing.TB, ts ...*tools.Tool) {
	t.Helper()
	for _, tl := range ts {
		if err := h.svc.Registry().Register(tl); err != nil {
			t.Fatal(err)
		}
	}
}

// runTurn parses body as a turn and waits for the batch.
func runTurn(t *testing.T, turns *job.Turns, tenant, body string) *job.Batch {
	t.Helper()
	turn, err := tools.ParseTurn([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := turns.Submit(t.Context(), tenant, job.TurnRequest{Turn: turn})
	if err != nil {
		t.Fatal(err)
	}
	return waitBatch(t, turns, tenant, b.ID)
}

func waitBatch(t *testing.T, turns *job.Turns, tenant, id string) *job.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := turns.Wait(ctx, tenant, id)
	if err != nil {
		t.Fatalf("Wait %s: %v (batch %+v)", id, err, b)
	}
	return b
}

func anthropicCalls(calls ...string) string {
	return `{"role":"assistant","content":[` + strings.Join(calls, ",") + `]}`
}

func use(id, name, input string) string {
	return `{"type":"tool_use","id":"` + id + `","name":"` + name + `","input":` + input + `}`
}

func TestTurnParallelAndSerial(t *testing.T) {
	h := newHarness(t)
	par, ser := newBarrier(4), newBarrier(3)
	h.register(t, par.tool("meet", true, 10*time.Second), ser.tool("meet_serial", false, 50*time.Millisecond))
	turns := job.NewTurns(h.svc, job.TurnConfig{})

	b := runTurn(t, turns, "acme", anthropicCalls(use("a", "meet", `{}`), use("b", "meet", `{}`), use("c", "meet", `{}`), use("d", "meet", `{}`)))
	if b.Mode != job.ModeParallel || b.State != job.BatchCompleted {
		t.Fatalf("mode %s state %s", b.Mode, b.State)
	}
	for _, c := range b.Calls {
		if c.Answer != "met" || c.JobID == "" || c.State != "succeeded" {
			t.Errorf("parallel call %+v", c)
		}
	}

	// One tool that is not parallel-safe makes the batch serial.
	b = runTurn(t, turns, "acme", anthropicCalls(use("a", "meet_serial", `{}`), use("b", "meet_serial", `{}`), use("c", "meet_serial", `{}`)))
	if b.Mode != job.ModeSerial {
		t.Fatalf("mode %s", b.Mode)
	}
	for i, c := range b.Calls {
		if c.Answer != "alone" {
			t.Errorf("serial call %d met others: %+v", i, c)
		}
		if i > 0 && c.StartedAt.Before(*b.Calls[i-1].FinishedAt) {
			t.Errorf("call %d started before call %d finished", i, i-1)
		}
	}
	if ser.maxIn != 1 {
		t.Errorf("serial batch had %d calls in flight at once", ser.maxIn)
	}
}

func TestTurnConcurrencyBound(t *testing.T) {
	h := newHarness(t)
	b8 := newBarrier(3) // never met with a bound of 2
	h.register(t, b8.tool("meet", true, 100*time.Millisecond))
	turns := job.NewTurns(h.svc, job.TurnConfig{Concurrency: 2})
	b := runTurn(t, turns, "acme", anthropicCalls(use("a", "meet", `{}`), use("b", "meet", `{}`), use("c", "meet", `{}`)))
	if b8.maxIn != 2 {
		t.Errorf("%d calls in flight with a bound of 2", b8.maxIn)
	}
	for _, c := range b.Calls {
		if c.Answer == "met" {
			t.Errorf("barrier of 3 met with concurrency 2: %+v", c)
		}
	}
}

func TestTurnDeniedBesideAllowed(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: oops
    action: deny
    reason: no oopsing
budgets:
  - effect: exec
    limit: 2
    per: 1h
`))
		turns := job.NewTurns(h.svc, job.TurnConfig{})
		b := runTurn(t, turns, "acme", anthropicCalls(
			use("t1", "add", `{"a":1,"b":2}`), use("t2", "oops", `{}`), use("t3", "echo", `{"text":"one"}`),
			use("t4", "echo", `{"text":"two"}`), use("t5", "echo", `{"text":"three"}`)))
		want := []struct{ state, reason, answer string }{
			{"succeeded", "", "3"},
			{"failed", "denied", "Error: refused by policy: no oopsing"},
			{"succeeded", "", "one"},
			{"succeeded", "", "two"},
			{"failed", "budget_exhausted", "Error: refused by policy"},
		}
		for i, w := range want {
			c := b.Calls[i]
			if c.State != w.state || c.Reason != w.reason || !strings.HasPrefix(c.Answer, w.answer) || c.JobID == "" {
				t.Errorf("call %d: %s/%s %q, want %s/%s %q", i, c.State, c.Reason, c.Answer, w.state, w.reason, w.answer)
			}
		}
		if b.Effects[tools.EffectExec] != 2 || len(b.Effects) != 1 {
			t.Errorf("effects %v, want exec: 2", b.Effects)
		}
	})
}

func TestTurnApprovalHoldsBatch(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: echo
    action: confirm
    reason: echo needs a human
`))
		turns := job.NewTurns(h.svc, job.TurnConfig{})
		turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "add", `{"a":1,"b":1}`), use("b", "echo", `{"text":"hi"}`),
			use("c", "echo", `{"text":"no"}`), use("d", "add", `{"a":2,"b":2}`))))
		b, err := turns.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn})
		if err != nil {
			t.Fatal(err)
		}
		if b.State != job.BatchPendingApproval {
			t.Fatalf("state %s", b.State)
		}
		if b.Calls[0].State != job.CallHeld || b.Calls[0].JobID != "" || b.Calls[1].State != "pending_approval" {
			t.Fatalf("calls %+v", b.Calls)
		}
		approvals, _, err := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{State: job.ApprovalPending})
		if err != nil || len(approvals) != 2 {
			t.Fatalf("approvals %v %v", approvals, err)
		}
		byJob := map[string]*job.Approval{}
		for _, a := range approvals {
			byJob[a.JobID] = a
		}
		// Approve one: the batch still waits for the other, nothing runs.
		if _, err := h.svc.DecideApproval(t.Context(), "acme", byJob[b.Calls[1].JobID].ID, job.ApprovalDecision{Approve: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		cur, _ := turns.Get(t.Context(), "acme", b.ID)
		if cur.State != job.BatchPendingApproval || cur.Calls[0].JobID != "" {
			t.Fatalf("batch ran before every approval was decided: %+v", cur)
		}
		if j, _ := h.svc.Get(t.Context(), "acme", b.Calls[1].JobID); j.State != job.StateQueued || j.StartedAt != nil {
			t.Fatalf("approved held job %+v", j)
		}
		if _, err := h.svc.DecideApproval(t.Context(), "acme", byJob[b.Calls[2].JobID].ID, job.ApprovalDecision{Approve: false, Reason: "not today"}); err != nil {
			t.Fatal(err)
		}
		done := waitBatch(t, turns, "acme", b.ID)
		want := []string{"2", "hi", "Error: a reviewer denied the call: not today", "4"}
		for i, w := range want {
			if done.Calls[i].Answer != w {
				t.Errorf("call %d answer %q, want %q", i, done.Calls[i].Answer, w)
			}
		}
		if done.Calls[2].Reason != job.ReasonApprovalDenied {
			t.Errorf("denied call %+v", done.Calls[2])
		}
		// Serial (echo is not parallel-safe): the batch's order, the approved
		// call after the first allowed one.
		if done.Mode != job.ModeSerial || done.Calls[1].StartedAt.Before(*done.Calls[0].FinishedAt) ||
			done.Calls[3].StartedAt.Before(*done.Calls[1].FinishedAt) {
			t.Errorf("order: %+v", done.Calls)
		}
	})
}

func TestTurnRetries(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Turns.RetryBackoff = time.Millisecond; c.Turns.Retries = 3 })
	h.register(t,
		&tools.Tool{Name: "vanish", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileWrite},
			Command: func(map[string]any) (tools.Command, error) { return tools.Command{Args: []string{"error"}}, nil }},
		&tools.Tool{Name: "vanish_idem", Effects: []tools.Effect{tools.EffectExec}, Idempotent: true,
			Command: func(map[string]any) (tools.Command, error) { return tools.Command{Args: []string{"error"}}, nil }})
	turns := job.NewTurns(h.svc, job.TurnConfig{})

	// The runner is unavailable twice: the call never started, so it is
	// retried even though echo runs a process.
	h.r.createFails.Store(2)
	b := runTurn(t, turns, "acme", anthropicCalls(use("a", "echo", `{"text":"third time"}`)))
	if c := b.Calls[0]; c.State != "succeeded" || c.Attempts != 3 || c.Answer != "third time" {
		t.Errorf("unavailable runner: %+v", c)
	}
	// The sandbox died during the call of a tool that writes: not run again.
	b = runTurn(t, turns, "acme", anthropicCalls(use("b", "vanish", `{}`)))
	if c := b.Calls[0]; c.State != "failed" || c.Reason != job.ReasonInternal || c.Attempts != 1 ||
		!strings.Contains(c.Answer, "not retried: the call may have started") {
		t.Errorf("unsafe retry: %+v", c)
	}
	// Marked idempotent: retried until the retries run out.
	b = runTurn(t, turns, "acme", anthropicCalls(use("c", "vanish_idem", `{}`)))
	if c := b.Calls[0]; c.State != "failed" || c.Attempts != 4 || !strings.Contains(c.Answer, "after 4 attempts") {
		t.Errorf("idempotent retry: %+v", c)
	}
	// A single job (no Retry) is not retried.
	h.r.createFails.Store(1)
	j := h.wait(t, "acme", h.submit(t, "acme", call("echo", `{"text":"x"}`)).ID)
	if j.State != job.StateFailed || j.Attempts != 1 {
		t.Errorf("single job: %s attempts %d", j.State, j.Attempts)
	}
}

func TestTurnArgumentsRepairedAndRefused(t *testing.T) {
	h := newHarness(t)
	turns := job.NewTurns(h.svc, job.TurnConfig{})
	b := runTurn(t, turns, "acme", `{"role":"assistant","tool_calls":[
		{"id":"c1","type":"function","function":{"name":"echo","arguments":"{'text': 'repaired',}"}},
		{"id":"c2","type":"function","function":{"name":"add","arguments":"{\"a\": \"one\", \"b\": 2}"}},
		{"id":"c3","type":"function","function":{"name":"ehco","arguments":"{}"}},
		{"id":"c4","type":"function","function":{"name":"echo","arguments":"{\"text\": [1, "}}]}`)
	if c := b.Calls[0]; c.Answer != "repaired" || !c.OK {
		t.Errorf("repaired: %+v", c)
	}
	if c := b.Calls[1]; c.State != job.CallInvalid || len(c.Details) != 1 || c.Details[0].Field != "/a" ||
		!strings.Contains(c.Answer, "/a: expected number, got string") || !strings.Contains(c.Answer, "call add again") {
		t.Errorf("bad field: %+v", c)
	}
	if c := b.Calls[2]; c.State != job.CallInvalid || !strings.Contains(c.Answer, `did you mean "echo"`) {
		t.Errorf("unknown tool: %+v", c)
	}
	if c := b.Calls[3]; c.State != job.CallInvalid || !strings.HasPrefix(c.Answer, "Error: invalid arguments for echo") {
		t.Errorf("unrepairable: %+v", c)
	}
	msgs, _ := json.Marshal(tools.TurnMessages(b.Dialect, b.Answers()))
	if !strings.Contains(string(msgs), `"tool_call_id":"c4"`) {
		t.Errorf("messages %s", msgs)
	}
}

func TestTurnReActAndArtifacts(t *testing.T) {
	h := newHarness(t)
	h.register(t, &tools.Tool{Name: "plot", ParallelSafe: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`),
		Run: func(_ context.Context, _ tools.Env, a map[string]any) (tools.Result, error) {
			return tools.Result{OK: true, Content: "plotted " + a["title"].(string),
				Artifacts: []tools.Artifact{{Name: "figure.png", MimeType: "image/png", Data: []byte("\x89PNG fake")}}}, nil
		}})
	turns := job.NewTurns(h.svc, job.TurnConfig{})
	b := runTurn(t, turns, "acme", "Thought: draw it\nAction: plot\nAction Input: sales\n")
	c := b.Calls[0]
	if !c.OK || !strings.HasPrefix(c.Answer, "plotted sales\n[produced figure.png (image/png") || len(c.Artifacts) != 1 {
		t.Fatalf("react call %+v", c)
	}
	a := c.Artifacts[0]
	if a.URL != job.ArtifactURL(c.JobID, "figure.png") || len(a.Data) != 0 || strings.Contains(c.Answer, a.URL) {
		t.Errorf("artifact %+v", a)
	}
	got, err := h.svc.Artifact(t.Context(), "acme", c.JobID, "figure.png")
	if err != nil || string(got.Data) != "\x89PNG fake" {
		t.Errorf("stored artifact %v %v", got, err)
	}
	if obs := tools.TurnObservation(b.Answers()); !strings.HasPrefix(obs, "Observation: plotted sales") {
		t.Errorf("observation %q", obs)
	}
	// Final Answer: nothing runs.
	b = runTurn(t, turns, "acme", "Thought: done\nFinal Answer: 42")
	if len(b.Calls) != 0 || b.FinalAnswer != "42" || b.State != job.BatchCompleted {
		t.Errorf("final %+v", b)
	}
}

func TestTurnSessionOrder(t *testing.T) {
	h := newHarness(t)
	par := newBarrier(2)
	h.register(t, par.tool("meet", true, 50*time.Millisecond))
	ses, err := h.svc.CreateSession(t.Context(), "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	turns := job.NewTurns(h.svc, job.TurnConfig{})
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "meet", `{}`), use("b", "echo", `{"text":"x"}`), use("c", "meet", `{}`))))
	b, err := turns.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, SessionID: ses.ID})
	if err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, turns, "acme", b.ID)
	if b.Mode != job.ModeSession || par.maxIn != 1 {
		t.Errorf("mode %s, %d in flight", b.Mode, par.maxIn)
	}
	for i, c := range b.Calls {
		if c.State != "succeeded" {
			t.Errorf("call %d %+v", i, c)
		}
		if i > 0 && c.StartedAt.Before(*b.Calls[i-1].FinishedAt) {
			t.Errorf("session order broken at %d", i)
		}
		if j, _ := h.svc.Get(t.Context(), "acme", c.JobID); j.SessionID != ses.ID {
			t.Errorf("job %s not in the session", c.JobID)
		}
	}
	if _, err := turns.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, SessionID: "ses_nope"}); err == nil {
		t.Error("unknown session accepted")
	}
}

// A turn sent again with the same idempotency key gets the same batch; sent
// to another executor (a restart: the batch is gone), its calls' jobs are
// found by key and nothing runs twice.
func TestTurnIdempotencyKey(t *testing.T) {
	h := newHarness(t)
	var runs atomic.Int64
	h.register(t, &tools.Tool{Name: "count", ParallelSafe: true,
		Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
			return tools.Result{OK: true, Content: fmt.Sprint(runs.Add(1))}, nil
		}})
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("k1", "count", `{}`), use("k2", "count", `{}`))))
	turns := job.NewTurns(h.svc, job.TurnConfig{})
	b1, err := turns.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, IdempotencyKey: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	b1 = waitBatch(t, turns, "acme", b1.ID)
	b2, _ := turns.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, IdempotencyKey: "key-1"})
	if b2.ID != b1.ID {
		t.Errorf("same key, new batch %s != %s", b2.ID, b1.ID)
	}
	other := job.NewTurns(h.svc, job.TurnConfig{})
	b3, err := other.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, IdempotencyKey: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	b3 = waitBatch(t, other, "acme", b3.ID)
	for i := range b3.Calls {
		if b3.Calls[i].JobID != b1.Calls[i].JobID || b3.Calls[i].Answer != b1.Calls[i].Answer {
			t.Errorf("call %d: %+v, first %+v", i, b3.Calls[i], b1.Calls[i])
		}
	}
	if runs.Load() != 2 {
		t.Errorf("the calls ran %d times, want 2", runs.Load())
	}
	// Another tenant's key is its own.
	b4, _ := turns.Submit(t.Context(), "other", job.TurnRequest{Turn: turn, IdempotencyKey: "key-1"})
	if b4.ID == b1.ID {
		t.Error("a key crossed tenants")
	}
}
