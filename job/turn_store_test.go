package job_test

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// A batch held by an approval survives a restart: the new process resumes
// it (the approval holds it again), the approved call and the allowed ones
// run in the batch's order, and a Turns that never ran it (another
// replica) answers it from the store; another tenant's is not found.
func TestTurnResumedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	policyYAML := `
rules:
  - tool: echo
    action: confirm
    reason: echo needs a human
`
	h1 := newHarness(t, withPolicy(t, "acme", policyYAML), inDir(dir))
	turns1 := job.NewTurns(h1.svc, job.TurnConfig{})
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "add", `{"a":1,"b":1}`), use("b", "echo", `{"text":"hi"}`),
		use("c", "nope", `{}`), use("d", "add", `{"a":2,"b":2}`))))
	b, err := turns1.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != job.BatchPendingApproval {
		t.Fatalf("state %s", b.State)
	}
	h1.close(t)

	h2 := newHarness(t, withPolicy(t, "acme", policyYAML), inDir(dir))
	turns2 := job.NewTurns(h2.svc, job.TurnConfig{})
	if err := turns2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	cur, err := turns2.Get(t.Context(), "acme", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != job.BatchPendingApproval || cur.Calls[0].JobID != "" || cur.Calls[1].JobID != b.Calls[1].JobID {
		t.Fatalf("resumed batch %+v", cur)
	}
	if _, err := turns2.Get(t.Context(), "other", b.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant's batch: %v", err)
	}
	// The same turn sent again with its key is the same batch.
	again, err := turns2.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn, IdempotencyKey: "k1"})
	if err != nil || again.ID != b.ID {
		t.Fatalf("resent turn: %+v, %v", again, err)
	}
	approvals, _, err := h2.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{State: job.ApprovalPending})
	if err != nil || len(approvals) != 1 {
		t.Fatalf("approvals %v %v", approvals, err)
	}
	if _, err := h2.svc.DecideApproval(t.Context(), "acme", approvals[0].ID, job.ApprovalDecision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	done := waitBatch(t, turns2, "acme", b.ID)
	want := []string{"2", "hi", "", "4"}
	for i, w := range want {
		if w != "" && done.Calls[i].Answer != w {
			t.Errorf("call %d answer %q, want %q", i, done.Calls[i].Answer, w)
		}
	}
	if done.Calls[2].State != job.CallInvalid || !done.Calls[2].IsError {
		t.Errorf("unknown tool's call %+v", done.Calls[2])
	}
	if done.Mode != job.ModeSerial || done.Calls[1].StartedAt.Before(*done.Calls[0].FinishedAt) ||
		done.Calls[3].StartedAt.Before(*done.Calls[1].FinishedAt) {
		t.Errorf("order: %+v", done.Calls)
	}

	// Another replica's view: from the store, the same answers.
	other := job.NewTurns(h2.svc, job.TurnConfig{})
	got := waitBatch(t, other, "acme", b.ID)
	if got.State != job.BatchCompleted || got.FinishedAt == nil {
		t.Fatalf("from the store: %+v", got)
	}
	for i := range done.Calls {
		if got.Calls[i].Answer != done.Calls[i].Answer || got.Calls[i].JobID != done.Calls[i].JobID {
			t.Errorf("call %d from the store %+v, in memory %+v", i, got.Calls[i], done.Calls[i])
		}
	}
	if msgs := tools.TurnMessages(got.Dialect, got.Answers()); len(msgs) != 1 { // Anthropic: one user message
		t.Errorf("messages from the store: %v", msgs)
	}
	if _, err := other.Get(t.Context(), "other", b.ID); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant's batch from the store: %v", err)
	}
}
