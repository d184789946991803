package job_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store/pgtest"
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

// A serial batch stopped mid-way (a graceful shutdown while its first call
// runs): the call that was never submitted runs exactly once in the next
// process, the stopped one answers what became of its job.
func TestTurnStoppedMidBatchResumes(t *testing.T) {
	dir := t.TempDir()
	var runs atomic.Int64
	count := func() *tools.Tool {
		return &tools.Tool{Name: "count", Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
			return tools.Result{OK: true, Content: fmt.Sprint(runs.Add(1))}, nil
		}}
	}
	h1 := newHarness(t, inDir(dir))
	h1.register(t, count())
	turns1 := job.NewTurns(h1.svc, job.TurnConfig{})
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "wait", `{}`), use("b", "count", `{}`))))
	b, err := turns1.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn})
	if err != nil {
		t.Fatal(err)
	}
	if b.Mode != job.ModeSerial {
		t.Fatalf("mode %s", b.Mode)
	}
	var first string
	for deadline := time.Now().Add(10 * time.Second); first == "" && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		cur, _ := turns1.Get(t.Context(), "acme", b.ID)
		first = cur.Calls[0].JobID
	}
	if first == "" {
		t.Fatal("the first call was never submitted")
	}
	h1.waitRunning(t, "acme", first)
	// Stop with a short grace: the running call is cancelled.
	sctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_ = h1.svc.Shutdown(sctx) // the deadline passes: expected
	cancel()
	h1.st.Close()
	if runs.Load() != 0 {
		t.Fatalf("the second call ran before the stop: %d", runs.Load())
	}

	h2 := newHarness(t, inDir(dir))
	h2.register(t, count())
	turns2 := job.NewTurns(h2.svc, job.TurnConfig{})
	if err := turns2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := waitBatch(t, turns2, "acme", b.ID)
	if done.Calls[0].JobID != first || !done.Calls[0].IsError || done.Calls[1].Answer != "1" || runs.Load() != 1 {
		t.Fatalf("after the restart: %+v (runs %d)", done.Calls, runs.Load())
	}
	// Recovering again (a third start) runs nothing more: the batch is
	// completed in the store (written just after its waiters woke).
	eventually(t, "the completed batch in the store", func() bool {
		rec, err := h2.st.GetBatch(t.Context(), b.ID)
		return err == nil && rec.State == job.BatchCompleted
	})
	h2.close(t)
	h3 := newHarness(t, inDir(dir))
	h3.register(t, count())
	turns3 := job.NewTurns(h3.svc, job.TurnConfig{})
	if err := turns3.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := turns3.Get(t.Context(), "acme", b.ID); err != nil || got.State != job.BatchCompleted || got.Calls[1].Answer != "1" {
		t.Fatalf("third start: %+v, %v", got, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the call ran %d times", runs.Load())
	}
}

// Retention deletes a completed batch with its jobs: a Turns that does
// not hold it (a restart, another replica) then finds none.
func TestTurnBatchRetention(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Retention = config.Retention{MaxAge: time.Millisecond, MaxBytes: -1, Interval: 20 * time.Millisecond}
	})
	turns := job.NewTurns(h.svc, job.TurnConfig{})
	b := runTurn(t, turns, "acme", anthropicCalls(use("a", "add", `{"a":1,"b":1}`), use("b", "nope", `{}`)))
	if b.State != job.BatchCompleted || b.Calls[0].Answer != "2" {
		t.Fatalf("batch %+v", b)
	}
	other := job.NewTurns(h.svc, job.TurnConfig{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := other.Get(t.Context(), "acme", b.ID)
		if errors.Is(err, job.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("completed batch not deleted by retention: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The job's entry in memory retires once its events are durable
	// (asynchronously): until then Get answers from it.
	for {
		_, err := h.svc.Get(t.Context(), "acme", b.Calls[0].JobID)
		if errors.Is(err, job.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch's job: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A batch resumed after its process stopped spends the guard's units of
// the calls it had not submitted exactly once: after a crash (no refund:
// the store is gone before the stop) the resumed calls run on the decision
// that spent them (Postgres: the store keeps the spend; SQLite: the
// in-memory guard is restored from the jobs, which do not have them, and
// decides again); after a graceful stop (the units given back) they are
// decided again. Either way the budget has exactly one unit left for a
// call after the batch.
func TestTurnResumedBatchSpendsOnce(t *testing.T) {
	const yml = `
budgets:
  - effect: exec
    limit: 3
    per: 24h
`
	for _, crash := range []bool{true, false} {
		t.Run(map[bool]string{true: "crash", false: "graceful"}[crash], func(t *testing.T) {
			bothStores(t, func(t *testing.T, store func() option) {
				dir := t.TempDir()
				opt := store()
				h1 := newHarness(t, opt, withPolicy(t, "acme", yml), inDir(dir))
				turns1 := job.NewTurns(h1.svc, job.TurnConfig{})
				turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "wait", `{}`),
					use("b", "echo", `{"text":"b"}`), use("c", "echo", `{"text":"c"}`))))
				b, err := turns1.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn})
				if err != nil {
					t.Fatal(err)
				}
				if b.Mode != job.ModeSerial {
					t.Fatalf("mode %s", b.Mode)
				}
				var first string
				eventually(t, "the first call submitted", func() bool {
					cur, _ := turns1.Get(t.Context(), "acme", b.ID)
					first = cur.Calls[0].JobID
					return first != ""
				})
				h1.waitRunning(t, "acme", first)
				if crash { // nothing the stop does reaches the store
					h1.st.Close()
				}
				sctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				_ = h1.svc.Shutdown(sctx) // the running call is cancelled
				cancel()
				h1.st.Close()

				h2 := newHarness(t, opt, withPolicy(t, "acme", yml), inDir(dir))
				close(h2.gate) // the first call, run again after a crash, ends
				turns2 := job.NewTurns(h2.svc, job.TurnConfig{})
				if err := turns2.Recover(t.Context()); err != nil {
					t.Fatal(err)
				}
				done := waitBatch(t, turns2, "acme", b.ID)
				for i := 1; i <= 2; i++ {
					if c := done.Calls[i]; c.IsError || c.State != string(job.StateSucceeded) {
						t.Errorf("resumed call %d: %s %q (%+v)", i, c.State, c.Answer, c.Guard)
					}
				}
				// 3 units: the batch's two echo calls, then one more.
				if j := h2.wait(t, "acme", h2.submit(t, "acme", call("echo", `{"text":"x"}`)).ID); j.Reason != "" {
					t.Fatalf("the budget's last unit: reason %q (%v)", j.Reason, j.Result)
				}
				if j := h2.wait(t, "acme", h2.submit(t, "acme", call("echo", `{"text":"y"}`)).ID); j.Reason != job.ReasonBudgetExhausted {
					t.Fatalf("past the budget: reason %q, want %s", j.Reason, job.ReasonBudgetExhausted)
				}
			})
		})
	}
}

// With replicas, a batch is its replica's: when that replica dies (its
// store gone, then its lease expired), the replica taking it over resumes
// the batch exactly once: the calls it had not submitted run there once,
// on the guard units spent at the batch's decision; a replica that joins
// later resumes nothing more.
func TestReplicasTurnResumedByTakeover(t *testing.T) {
	const yml = `
budgets:
  - effect: exec
    limit: 3
    per: 24h
`
	url := pgtest.Shared(t).NewDatabase(t)
	var runs atomic.Int64
	count := func() *tools.Tool {
		return &tools.Tool{Name: "count", Effects: []tools.Effect{tools.EffectExec},
			Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
				return tools.Result{OK: true, Content: fmt.Sprint(runs.Add(1))}, nil
			}}
	}
	replica := func(id string) *harness {
		h := newHarness(t, onPostgres(t, url), withPolicy(t, "acme", yml), func(c *job.Config, _ *harness) {
			c.Replica = &job.ReplicaConfig{ID: id, LeaseTTL: 600 * time.Millisecond}
		})
		h.register(t, count())
		return h
	}
	h1 := replica("r1")
	turns1 := job.NewTurns(h1.svc, job.TurnConfig{})
	if err := turns1.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "wait", `{}`), use("b", "count", `{}`), use("c", "count", `{}`))))
	b, err := turns1.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn})
	if err != nil {
		t.Fatal(err)
	}
	if b.Mode != job.ModeSerial {
		t.Fatalf("mode %s", b.Mode)
	}
	var first string
	eventually(t, "the first call submitted", func() bool {
		cur, _ := turns1.Get(t.Context(), "acme", b.ID)
		first = cur.Calls[0].JobID
		return first != ""
	})
	h1.waitRunning(t, "acme", first)

	// r2 is live beside r1: it takes nothing of r1's.
	h2 := replica("r2")
	close(h2.gate)
	turns2 := job.NewTurns(h2.svc, job.TurnConfig{})
	if err := turns2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if runs.Load() != 0 {
		t.Fatalf("calls of r1's batch ran while r1 was live: %d", runs.Load())
	}
	// r1 dies: nothing it does reaches the store any more (the pool
	// refuses new connections; Close returns once r1's listener, ended at
	// its Shutdown in the cleanup, gives its own back).
	go h1.st.Close()

	done := waitBatch(t, turns2, "acme", b.ID)
	if c := done.Calls[0]; c.JobID != first || c.State != string(job.StateFailed) || c.Reason != job.ReasonLost {
		t.Errorf("r1's running call after the takeover: %s/%s (%s)", c.State, c.Reason, c.JobID)
	}
	for i, want := range []string{"", "1", "2"} {
		if c := done.Calls[i]; want != "" && (c.Answer != want || c.IsError) {
			t.Errorf("call %d: %q (%s), want %q", i, c.Answer, c.State, want)
		}
	}
	eventually(t, "the completed batch in the store", func() bool {
		rec, err := h2.st.GetBatch(t.Context(), b.ID)
		return err == nil && rec.State == job.BatchCompleted
	})
	// A replica joining now resumes nothing; the budget has one unit left.
	h3 := replica("r3")
	close(h3.gate)
	turns3 := job.NewTurns(h3.svc, job.TurnConfig{})
	if err := turns3.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if j := h3.wait(t, "acme", h3.submit(t, "acme", call("count", `{}`)).ID); j.Reason != "" || j.Result.Content != "3" {
		t.Fatalf("the budget's last unit: %s %q", j.Reason, j.Result.Content)
	}
	if j := h3.wait(t, "acme", h3.submit(t, "acme", call("count", `{}`)).ID); j.Reason != job.ReasonBudgetExhausted {
		t.Fatalf("past the budget: reason %q", j.Reason)
	}
	if runs.Load() != 3 {
		t.Fatalf("count ran %d times, want 3", runs.Load())
	}
}

// A replica restarted with its ID (a new epoch) resumes the batches its
// previous process left unfinished, taken over at its start.
func TestReplicasTurnResumedByRestart(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	replica := func() *harness {
		return newHarness(t, onPostgres(t, url), func(c *job.Config, _ *harness) {
			c.Replica = &job.ReplicaConfig{ID: "r1"}
		})
	}
	h1 := replica()
	turns1 := job.NewTurns(h1.svc, job.TurnConfig{})
	if err := turns1.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	turn, _ := tools.ParseTurn([]byte(anthropicCalls(use("a", "wait", `{}`), use("b", "add", `{"a":1,"b":2}`))))
	b, err := turns1.Submit(t.Context(), "acme", job.TurnRequest{Turn: turn})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	eventually(t, "the first call submitted", func() bool {
		cur, _ := turns1.Get(t.Context(), "acme", b.ID)
		first = cur.Calls[0].JobID
		return first != ""
	})
	h1.waitRunning(t, "acme", first)
	sctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_ = h1.svc.Shutdown(sctx) // the running call is cancelled
	cancel()
	h1.st.Close()

	h2 := replica()
	close(h2.gate)
	turns2 := job.NewTurns(h2.svc, job.TurnConfig{})
	if err := turns2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := waitBatch(t, turns2, "acme", b.ID)
	if done.Calls[0].JobID != first || done.Calls[1].Answer != "3" || done.Calls[1].IsError {
		t.Fatalf("after the restart: %+v", done.Calls)
	}
}
