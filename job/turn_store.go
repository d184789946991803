package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// The turn executor's durable side (turn.go): a batch's record in the
// store, reading a batch back from it, and resuming the batches a stopped
// process left unfinished.

// storePoll is how often Wait reads a batch this process does not hold.
const storePoll = 200 * time.Millisecond

// newRecord is b's record as Submit writes it: every runnable call with
// its reserved job ID and prepared arguments (and, when spent says the
// store spent the guard's decisions, the decision: BatchCall.Decision),
// every other with its answer.
func newRecord(b *Batch, run []*pendingCall, spent bool) *BatchRecord {
	r := &BatchRecord{ID: b.ID, Tenant: b.Tenant, IdempotencyKey: b.key, SessionID: b.SessionID,
		Dialect: b.Dialect, Mode: b.Mode, State: BatchRunning, CreatedAt: b.CreatedAt, Calls: make([]BatchCall, len(b.Calls)),
		FinalAnswer: b.FinalAnswer, HasFinal: b.HasFinal, Tags: slices.Clone(b.Tags), Metadata: b.Metadata,
		Callback: cloneCallback(b.Callback)}
	for i := range b.Calls {
		r.Calls[i] = answered(&b.Calls[i])
	}
	for _, pc := range run {
		c := &r.Calls[pc.i]
		c.State, c.Error, c.Details, c.Answer = "", "", nil, ""
		c.Tool, c.JobID, c.Arguments = pc.tool.Name, pc.reserved, pc.call.Arguments
		if spent && pc.decision.Outcome != policy.OutcomeDeny {
			c.Decision = spentDecision(pc.decision)
		}
		if pc.decision.Outcome == policy.OutcomeConfirm {
			r.State = BatchPendingApproval
		}
	}
	return r
}

// answered is the record of a call answered without a job (rec).
func answered(rec *CallRecord) BatchCall {
	return BatchCall{CallID: rec.CallID, GeneratedID: rec.GeneratedID, Tool: rec.Tool, ReturnDirect: rec.ReturnDirect,
		State: rec.State, Error: rec.Error, Details: slices.Clone(rec.Details), Answer: rec.Answer}
}

func cloneRecord(r *BatchRecord) *BatchRecord {
	c := *r
	c.Calls = slices.Clone(r.Calls)
	c.Callback = cloneCallback(r.Callback)
	return &c
}

// save writes b's record (its writes in order; a failure is logged: the
// batch goes on in memory, and a batch recorded unfinished is resumed).
func (t *Turns) save(b *Batch) {
	if err := t.write(b); err != nil {
		t.s.log.Error("record batch", "batch", b.ID, "err", err)
	}
}

// write writes b's record (its writes in order).
func (t *Turns) write(b *Batch) error {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	b.mu.Lock()
	rec := cloneRecord(b.rec)
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.s.st.UpdateBatch(ctx, rec); err != nil {
		return fmt.Errorf("state %s: %w", rec.State, err)
	}
	return nil
}

// fromStore reads a tenant's batch from the store.
func (t *Turns) fromStore(ctx context.Context, tenant, id string) (*Batch, error) {
	rec, err := t.s.st.GetBatch(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && rec.Tenant != tenant) {
		return nil, fmt.Errorf("%s: %w", id, ErrBatchNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get batch %s: %w", id, err)
	}
	return t.load(ctx, rec), nil
}

// waitStore is Wait for a batch this process does not hold.
func (t *Turns) waitStore(ctx context.Context, tenant, id string) (*Batch, error) {
	tick := time.NewTicker(storePoll)
	defer tick.Stop()
	for {
		b, err := t.fromStore(context.WithoutCancel(ctx), tenant, id)
		if err != nil || b.Done() {
			return b, err
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-tick.C:
		}
	}
}

// load is the batch of rec, its calls' records read from their jobs. A
// batch recorded unfinished whose every call has its answer is completed
// (its last job's end is its finish): its process stopped before
// recording that, or has not yet.
func (t *Turns) load(ctx context.Context, rec *BatchRecord) *Batch {
	b := batchOf(rec)
	complete := true
	var last time.Time
	pending := false
	for i, c := range rec.Calls {
		cr := &b.Calls[i]
		if c.JobID == "" {
			continue
		}
		j, err := t.s.Get(ctx, rec.Tenant, c.JobID)
		switch {
		case err == nil:
			fillRecord(cr, j)
			if !j.State.Terminal() {
				complete = false
			}
			pending = pending || j.State == StatePendingApproval
			if j.FinishedAt != nil && j.FinishedAt.After(last) {
				last = *j.FinishedAt
			}
		case errors.Is(err, ErrNotFound) && rec.State == BatchCompleted:
			cr.State, cr.IsError = CallInvalid, true
			cr.Answer = "Error: the call's record was deleted (retention)"
		case errors.Is(err, ErrNotFound): // not submitted yet
			complete = false
			cr.State, cr.IsError = CallHeld, true
			cr.Answer = "Error: the call has not run yet"
		default:
			complete = false
			cr.State, cr.IsError = CallHeld, true
			cr.Answer = "Error: the call's record could not be read: " + err.Error()
		}
	}
	switch {
	case rec.State == BatchCompleted:
	case complete:
		b.State = BatchCompleted
		if last.IsZero() {
			last = rec.CreatedAt
		}
		b.FinishedAt = &last
	case pending:
		b.State = BatchPendingApproval
	default:
		b.State = BatchRunning
	}
	if b.State == BatchCompleted {
		for _, c := range b.Calls {
			for _, e := range c.Effects {
				b.Effects[e]++
			}
		}
	}
	return b
}

// batchOf is the batch of rec before its jobs are read: the calls
// answered without a job have their answers, the others only their IDs.
func batchOf(rec *BatchRecord) *Batch {
	b := &Batch{ID: rec.ID, Tenant: rec.Tenant, SessionID: rec.SessionID, Dialect: rec.Dialect, State: rec.State,
		Mode: rec.Mode, Calls: make([]CallRecord, len(rec.Calls)), Effects: map[tools.Effect]int{},
		FinalAnswer: rec.FinalAnswer, HasFinal: rec.HasFinal, CreatedAt: rec.CreatedAt, FinishedAt: rec.FinishedAt,
		Callback: cloneCallback(rec.Callback), Tags: slices.Clone(rec.Tags), Metadata: rec.Metadata,
		key: rec.IdempotencyKey, done: make(chan struct{}), mu: &sync.Mutex{}, saveMu: &sync.Mutex{}, rec: cloneRecord(rec)}
	for i, c := range rec.Calls {
		cr := &b.Calls[i]
		cr.CallID, cr.GeneratedID, cr.Tool, cr.ReturnDirect = c.CallID, c.GeneratedID, c.Tool, c.ReturnDirect
		if c.JobID == "" {
			cr.State, cr.Error, cr.Details, cr.Answer, cr.IsError = c.State, c.Error, slices.Clone(c.Details), c.Answer, true
		}
	}
	return b
}

// Recover resumes the batches a stopped process left unfinished: their
// calls that were submitted are waited for (an approval still pending
// holds the batch again), those that were not are decided by the guard
// now and run in the batch's order. Call it once, after the service's
// Start and before serving. With replicas a batch is its replica's: this
// one resumes those it took over (its own previous process's, at Start,
// and every expired replica's, then and whenever its lease loop takes
// one over), each exactly once across replicas; Get answers any.
func (t *Turns) Recover(ctx context.Context) error {
	s := t.s
	if s.rep != nil {
		s.rep.onBatches(func(recs []*BatchRecord) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			for _, rec := range recs {
				t.resume(ctx, rec)
			}
		})
		return nil
	}
	recs, err := s.st.ListUnfinishedBatches(ctx)
	if err != nil {
		return fmt.Errorf("resume batches: %w", err)
	}
	for _, rec := range recs {
		t.resume(ctx, rec)
	}
	if len(recs) > 0 {
		s.log.Info("resumed turn batches of a previous process", "count", len(recs))
	}
	return nil
}

// resume runs rec again in this process.
func (t *Turns) resume(ctx context.Context, rec *BatchRecord) {
	s := t.s
	b := t.load(ctx, rec)
	b.State = BatchRunning
	b.FinishedAt = nil
	var run, fresh, ready, pending []*pendingCall
	now := time.Now().UTC()
	for i, c := range rec.Calls {
		if c.JobID == "" {
			continue
		}
		cr := &b.Calls[i]
		tool, ok := s.reg.Lookup(c.Tool)
		pc := &pendingCall{i: i, call: tools.Call{ID: c.CallID, Name: c.Tool, Arguments: c.Arguments}, tool: tool, reserved: c.JobID}
		switch cr.State {
		case CallHeld: // not submitted yet
			if !ok {
				failed(cr, fmt.Errorf("%w: tool %s is no longer registered", ErrInvalid, c.Tool))
				b.rec.Calls[i] = answered(cr)
				continue
			}
			fresh = append(fresh, pc)
		case string(StatePendingApproval):
			pc.jobID = c.JobID
			pc.decision.Outcome = policy.OutcomeConfirm
			s.holdForBatch(c.JobID)
			pending = append(pending, pc)
		default: // queued, running (the service runs it) or ended
			pc.jobID, pc.resumed = c.JobID, true
		}
		run = append(run, pc)
	}
	// A call whose units the store spent before the stop runs on that
	// decision (BatchCall.Decision); the others are decided now.
	var decide []*pendingCall
	for _, pc := range fresh {
		if d := rec.Calls[pc.i].Decision; d != nil && s.atomic != nil {
			pc.decision = d.decision()
			continue
		}
		decide = append(decide, pc)
	}
	ts := make([]*tools.Tool, len(decide))
	for k, pc := range decide {
		ts[k] = pc.tool
	}
	spent := s.atomic != nil && s.guardEnabled(b.Tenant)
	for k, d := range s.DecideBatch(b.Tenant, b.SessionID, ts) {
		pc := decide[k]
		pc.decision = d
		if spent && d.Outcome != policy.OutcomeDeny {
			b.rec.Calls[pc.i].Decision = spentDecision(d) // written below, before the call is submitted
		}
	}
	for _, pc := range fresh {
		d := pc.decision
		switch d.Outcome {
		case policy.OutcomeDeny:
			t.submit(ctx, b, pc, false, false)
		case policy.OutcomeConfirm:
			t.submit(ctx, b, pc, true, false)
			if b.Calls[pc.i].State == string(StatePendingApproval) {
				pending = append(pending, pc)
			}
		default:
			b.Calls[pc.i].Guard = s.record(&Job{Tenant: b.Tenant}, d, now)
			ready = append(ready, pc)
		}
	}
	if len(pending) > 0 {
		b.State = BatchPendingApproval
	}
	t.add(b)
	t.save(b) // calls answered here (a tool gone, a refusal) and their jobs
	s.log.Info("resume batch", "batch", b.ID, "tenant", b.Tenant, "calls", len(b.Calls), "pending_approval", len(pending))
	go t.execute(b, run, ready, pending)
}

// holdForBatch makes a recovered pending_approval job wait, once
// approved, for its batch's Release (SubmitRequest.Hold), and lets
// AwaitDecision wait for it.
func (s *Service) holdForBatch(id string) {
	e := s.entry(id)
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.job.State != StatePendingApproval {
		return
	}
	e.hold = true
	if e.decided == nil {
		e.decided = make(chan struct{})
	}
}
