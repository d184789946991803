package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// NewBatch is a running batch of tenant created at created whose calls
// reserve the jobs jobIDs, plus one call answered without a job.
func NewBatch(id, tenant string, created time.Time, jobIDs ...string) *job.BatchRecord {
	b := &job.BatchRecord{ID: id, Tenant: tenant, Dialect: tools.DialectOpenAIChat, Mode: job.ModeParallel,
		State: job.BatchRunning, CreatedAt: created}
	for i, jid := range jobIDs {
		b.Calls = append(b.Calls, job.BatchCall{CallID: fmt.Sprintf("call_%d", i), Tool: "echo", JobID: jid,
			Arguments: json.RawMessage(`{"text":"hi"}`)})
	}
	b.Calls = append(b.Calls, job.BatchCall{CallID: "call_bad", GeneratedID: true, Tool: "nope", State: job.CallInvalid,
		Error: "unknown tool nope", Details: []tools.Problem{{Field: "name", Message: "a known tool"}},
		Answer: "Error: unknown tool nope"})
	return b
}

// Batches: create, get (by ID and by idempotency key), update, the
// unfinished list, and the conflicts.
func testBatches(t *testing.T, b Backend) {
	s, reopen := b.Open(t)
	ctx := t.Context()
	b1 := NewBatch("tc_1", "acme", base, "j1", "j2")
	b1.IdempotencyKey, b1.SessionID = "k1", "ses_1"
	b1.FinalAnswer, b1.HasFinal = "", false
	b1.Tags, b1.Metadata = []string{"eval"}, map[string]string{"user": "u1"}
	b1.Callback = &job.Callback{URL: "http://127.0.0.1:9/hook", State: job.CallbackPending}
	b1.Calls[0].GeneratedID, b1.Calls[1].ReturnDirect = true, true
	must(t, s.CreateBatch(ctx, b1))
	got, err := s.GetBatch(ctx, "tc_1")
	must(t, err)
	if !reflect.DeepEqual(got, b1) {
		t.Fatalf("GetBatch = %+v, want %+v", got, b1)
	}
	got, err = s.GetBatchByIdempotencyKey(ctx, "acme", "k1")
	must(t, err)
	if !reflect.DeepEqual(got, b1) {
		t.Fatalf("GetBatchByIdempotencyKey = %+v, want %+v", got, b1)
	}
	_, err = s.GetBatchByIdempotencyKey(ctx, "other", "k1")
	wantIs(t, "another tenant's key", err, job.ErrNotFound)
	_, err = s.GetBatchByIdempotencyKey(ctx, "acme", "")
	wantIs(t, "empty key", err, job.ErrNotFound)
	_, err = s.GetBatch(ctx, "tc_none")
	wantIs(t, "missing batch", err, job.ErrNotFound)

	// Conflicts: the same ID; the same tenant and key. Another tenant
	// may use the key; batches without a key never conflict.
	wantIs(t, "duplicate batch ID", s.CreateBatch(ctx, NewBatch("tc_1", "acme", base)), job.ErrConflict)
	dupKey := NewBatch("tc_2", "acme", base)
	dupKey.IdempotencyKey = "k1"
	wantIs(t, "duplicate idempotency key", s.CreateBatch(ctx, dupKey), job.ErrConflict)
	otherTenant := NewBatch("tc_3", "beta", base.Add(time.Second), "j3")
	otherTenant.IdempotencyKey = "k1"
	must(t, s.CreateBatch(ctx, otherTenant))
	b4 := NewBatch("tc_4", "acme", base.Add(2*time.Second))
	b4.State, b4.Dialect, b4.Mode = job.BatchPendingApproval, tools.DialectReAct, job.ModeSerial
	b4.FinalAnswer, b4.HasFinal = "42", true
	must(t, s.CreateBatch(ctx, b4))
	must(t, s.CreateBatch(ctx, NewBatch("tc_5", "acme", base.Add(3*time.Second))))

	// Update: state, finished_at, calls (a job ID changed, one refused
	// at submission) and the callback; ID, tenant, key and created_at
	// stay.
	fin := base.Add(time.Minute)
	b1.State, b1.FinishedAt = job.BatchCompleted, &fin
	b1.Calls[1].JobID = "j2b"
	b1.Calls[0].JobID, b1.Calls[0].State, b1.Calls[0].Error, b1.Calls[0].Answer = "", job.CallInvalid, "queue full", "Error: queue full"
	b1.Callback = &job.Callback{URL: "http://127.0.0.1:9/hook", State: job.CallbackDelivered,
		Attempts: []job.CallbackAttempt{{At: base.Add(time.Minute), DurationMS: 3, Status: 204}}}
	must(t, s.UpdateBatch(ctx, b1))
	got, err = reopen().GetBatch(ctx, "tc_1")
	must(t, err)
	if !reflect.DeepEqual(got, b1) {
		t.Fatalf("after UpdateBatch = %+v, want %+v", got, b1)
	}
	wantIs(t, "update a missing batch", s.UpdateBatch(ctx, NewBatch("tc_none", "acme", base)), job.ErrNotFound)

	// Unfinished: every batch not completed, oldest first.
	un, err := s.ListUnfinishedBatches(ctx)
	must(t, err)
	var ids []string
	for _, u := range un {
		ids = append(ids, u.ID)
	}
	if want := []string{"tc_3", "tc_4", "tc_5"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("ListUnfinishedBatches = %v, want %v", ids, want)
	}
	if !reflect.DeepEqual(un[1], b4) {
		t.Fatalf("unfinished tc_4 = %+v, want %+v", un[1], b4)
	}
}

// Retention: a completed batch goes with the last of its jobs, in the
// same DeleteFinishedJobs; a batch with a job left, a batch not
// completed and one finished after the cut stay; a batch without jobs
// goes by its own finish time.
func testBatchRetention(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	for i := range 4 {
		j := NewJob(fmt.Sprintf("j%d", i), "acme", base)
		must(t, s.Create(ctx, j))
		if i != 3 { // j3 stays running
			finish(t, s, j, base.Add(time.Duration(i+1)*time.Minute), job.StateSucceeded)
		}
	}
	complete := func(bt *job.BatchRecord, at time.Time) *job.BatchRecord {
		must(t, s.CreateBatch(ctx, bt))
		bt.State, bt.FinishedAt = job.BatchCompleted, &at
		must(t, s.UpdateBatch(ctx, bt))
		return bt
	}
	complete(NewBatch("tc_gone", "acme", base, "j0", "j1"), base.Add(3*time.Minute)) // both jobs go
	complete(NewBatch("tc_jobless", "acme", base), base.Add(time.Minute))            // no job at all
	complete(NewBatch("tc_left", "acme", base, "j2", "j3"), base.Add(3*time.Minute)) // j3 is running
	complete(NewBatch("tc_late", "acme", base), base.Add(time.Hour))                 // after the cut
	must(t, s.CreateBatch(ctx, NewBatch("tc_open", "acme", base, "j0")))             // not completed

	cut := base.Add(10 * time.Minute)
	d, err := s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 10)
	must(t, err)
	if d.Jobs != 3 || d.Batches != 2 || d.Bytes <= 0 {
		t.Fatalf("DeleteFinishedJobs = %+v, want 3 jobs (j0-j2) and 2 batches (tc_gone, tc_jobless)", d)
	}
	for _, id := range []string{"tc_gone", "tc_jobless"} {
		_, err := s.GetBatch(ctx, id)
		wantIs(t, "deleted batch "+id, err, job.ErrNotFound)
	}
	for _, id := range []string{"tc_left", "tc_late", "tc_open"} {
		if _, err := s.GetBatch(ctx, id); err != nil {
			t.Fatalf("batch %s deleted: %v", id, err)
		}
	}
	// Nothing more to do: no write.
	d, err = s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 10)
	must(t, err)
	if d != (job.Deleted{}) {
		t.Fatalf("second pass = %+v, want nothing", d)
	}
	// j3 finishes: tc_left goes with it, once its cut has passed.
	j3, err := s.Get(ctx, "j3")
	must(t, err)
	finish(t, s, j3, base.Add(4*time.Minute), job.StateSucceeded)
	d, err = s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 10)
	must(t, err)
	if d.Jobs != 1 || d.Batches != 1 {
		t.Fatalf("after j3 finished: %+v, want j3 and tc_left", d)
	}
	_, err = s.GetBatch(ctx, "tc_left")
	wantIs(t, "deleted batch tc_left", err, job.ErrNotFound)
}
