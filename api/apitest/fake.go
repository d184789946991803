// Package apitest provides an in-memory api.JobService for tests of the API,
// its Go client and the CLI. It is a fake, not a job service: calls are
// decided by a Handle function, and jobs move only when tests move them.
package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// Fake is an in-memory JobService. The zero value is not usable; call New.
type Fake struct {
	// Handle decides a submitted call: an error is returned by Submit
	// (ValidationError, ErrUnknownTool...); a result finishes the job at
	// once (succeeded when OK, else failed with reason tool_error); nil and
	// nil leave it queued for Finish. A nil Handle leaves every job queued.
	Handle func(tenant string, c tools.Call) (*tools.Result, error)
	// Reg is returned by Registry (may be nil).
	Reg *tools.Registry
	// RetryAfter is returned by QueueRetryAfter.
	RetryAfter int

	mu      sync.Mutex
	seq     int
	jobs    map[string]*entry
	order   []string // IDs, oldest first
	idem    map[string]string
	changed chan struct{} // closed and replaced on every change
}

type entry struct {
	j         *job.Job
	events    []job.Event
	artifacts map[string]tools.Artifact
}

// New returns an empty fake.
func New() *Fake {
	return &Fake{jobs: map[string]*entry{}, idem: map[string]string{}, changed: make(chan struct{})}
}

// now is fixed-width UTC so JSON round trips compare equal.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) emitLocked(e *entry, t job.EventType, data string) {
	ev := job.Event{Seq: len(e.events) + 1, Type: t, Time: now(), Data: data}
	if t != job.EventStdout && t != job.EventStderr {
		snap := *e.j
		ev.Job = &snap
	}
	e.events = append(e.events, ev)
}

// Submit implements api.JobService.
func (f *Fake) Submit(ctx context.Context, tenant string, req job.SubmitRequest) (*job.Job, bool, error) {
	f.mu.Lock()
	if req.IdempotencyKey != "" {
		if id, ok := f.idem[tenant+"\x00"+req.IdempotencyKey]; ok {
			snap := *f.jobs[id].j
			f.mu.Unlock()
			if snap.Tool != req.Call.Name { // as job.Service judges another request
				return nil, false, fmt.Errorf("%w: Idempotency-Key %q was used for job %s, a different request", job.ErrIdempotencyKeyReused, req.IdempotencyKey, snap.ID)
			}
			return &snap, false, nil
		}
	}
	f.mu.Unlock()

	var res *tools.Result
	if f.Handle != nil {
		var err error
		if res, err = f.Handle(tenant, req.Call); err != nil {
			return nil, false, err
		}
	}
	args := req.Call.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	} else if args[0] == '"' {
		var s string
		if json.Unmarshal(args, &s) == nil && json.Valid([]byte(s)) {
			args = json.RawMessage(s)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := "job_" + strconv.Itoa(f.seq)
	callID := req.Call.ID
	if callID == "" {
		callID = "call_" + strconv.Itoa(f.seq)
	}
	j := &job.Job{
		ID: id, Tenant: tenant, Tool: req.Call.Name, CallID: callID, Args: args,
		IdempotencyKey: req.IdempotencyKey, Runner: "fake", Limits: req.Limits,
		State: job.StateQueued, CreatedAt: now(), Tags: req.Tags, Metadata: req.Metadata,
	}
	e := &entry{j: j}
	f.jobs[id] = e
	f.order = append(f.order, id)
	if req.IdempotencyKey != "" {
		f.idem[tenant+"\x00"+req.IdempotencyKey] = id
	}
	f.emitLocked(e, job.EventQueued, "")
	if res != nil {
		f.finishLocked(e, res)
	}
	f.notifyLocked()
	snap := *j
	return &snap, true, nil
}

func (f *Fake) finishLocked(e *entry, res *tools.Result) {
	t := now()
	if e.j.StartedAt == nil {
		e.j.StartedAt = &t
		e.j.State = job.StateRunning
		e.j.Attempts++
		f.emitLocked(e, job.EventStarted, "")
	}
	// Artifacts are kept apart, the result references them (as the job
	// service does).
	if res != nil && len(res.Artifacts) > 0 {
		c := *res
		c.Artifacts = nil
		e.artifacts = map[string]tools.Artifact{}
		for _, a := range res.Artifacts {
			e.artifacts[a.Name] = a
			a.Size, a.Data, a.URL = int64(len(a.Data)), nil, job.ArtifactURL(e.j.ID, a.Name)
			c.Artifacts = append(c.Artifacts, a)
		}
		res = &c
	}
	e.j.Result = res
	e.j.FinishedAt = &t
	e.j.State = job.StateSucceeded
	if !res.OK {
		e.j.State, e.j.Reason = job.StateFailed, job.ReasonToolError
	}
	f.emitLocked(e, job.EventFinished, "")
}

// Start moves a queued job to running.
func (f *Fake) Start(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.jobs[id]
	t := now()
	e.j.StartedAt, e.j.State = &t, job.StateRunning
	e.j.Attempts++
	f.emitLocked(e, job.EventStarted, "")
	f.notifyLocked()
}

// Hold moves a queued job to pending_approval, waiting for approvalID.
func (f *Fake) Hold(id, approvalID, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.jobs[id]
	e.j.State = job.StatePendingApproval
	e.j.Guard = &job.GuardRecord{Outcome: "confirm", Rule: "rules[0]", Reason: reason, ApprovalID: approvalID, DecidedAt: now()}
	f.notifyLocked()
}

// Output emits a stdout or stderr event.
func (f *Fake) Output(id string, t job.EventType, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emitLocked(f.jobs[id], t, data)
	f.notifyLocked()
}

// Finish ends a job with res.
func (f *Fake) Finish(id string, res *tools.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finishLocked(f.jobs[id], res)
	f.notifyLocked()
}

func (f *Fake) lookupLocked(tenant, id string) (*entry, error) {
	e, ok := f.jobs[id]
	if !ok || (e.j.Tenant != tenant && tenant != job.AllTenants) {
		return nil, fmt.Errorf("%w: %s", job.ErrNotFound, id)
	}
	return e, nil
}

// Artifact implements api.ArtifactService.
func (f *Fake) Artifact(ctx context.Context, tenant, id, name string) (*tools.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, err := f.lookupLocked(tenant, id)
	if err != nil {
		return nil, err
	}
	a, ok := e.artifacts[name]
	if !ok {
		return nil, fmt.Errorf("%w: no artifact %q", job.ErrNotFound, name)
	}
	return &a, nil
}

// Get implements api.JobService.
func (f *Fake) Get(ctx context.Context, tenant, id string) (*job.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, err := f.lookupLocked(tenant, id)
	if err != nil {
		return nil, err
	}
	snap := *e.j
	return &snap, nil
}

// List implements api.JobService: newest first; the cursor is the index
// of the next job in that order.
func (f *Fake) List(ctx context.Context, tenant string, lf job.ListFilter) ([]*job.Job, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	limit := lf.Limit
	if limit <= 0 {
		limit = 50
	}
	start := 0
	if lf.Cursor != "" {
		n, err := strconv.Atoi(lf.Cursor)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("%w: bad cursor %q", job.ErrInvalid, lf.Cursor)
		}
		start = n
	}
	var out []*job.Job
	var matched int
	for i := len(f.order) - 1; i >= 0; i-- {
		j := f.jobs[f.order[i]].j
		if (j.Tenant != tenant && tenant != job.AllTenants) || (lf.Tool != "" && j.Tool != lf.Tool) || (lf.State != "" && j.State != lf.State) ||
			(lf.SessionID != "" && j.SessionID != lf.SessionID) || (!lf.Since.IsZero() && j.CreatedAt.Before(lf.Since)) ||
			(!lf.Until.IsZero() && !j.CreatedAt.Before(lf.Until)) || !lf.Matches(j.Tags, j.Metadata) {
			continue
		}
		matched++
		if matched <= start {
			continue
		}
		if len(out) == limit {
			return out, strconv.Itoa(start + limit), nil
		}
		snap := *j
		out = append(out, &snap)
	}
	return out, "", nil
}

// Cancel implements api.JobService.
func (f *Fake) Cancel(ctx context.Context, tenant, id string) (*job.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, err := f.lookupLocked(tenant, id)
	if err != nil {
		return nil, err
	}
	if !e.j.State.Terminal() {
		t := now()
		e.j.State, e.j.Reason, e.j.FinishedAt = job.StateCancelled, job.ReasonCancelled, &t
		f.emitLocked(e, job.EventFinished, "")
		f.notifyLocked()
	}
	snap := *e.j
	return &snap, nil
}

// Wait implements api.JobService.
func (f *Fake) Wait(ctx context.Context, tenant, id string) (*job.Job, error) {
	for {
		f.mu.Lock()
		e, err := f.lookupLocked(tenant, id)
		if err != nil {
			f.mu.Unlock()
			return nil, err
		}
		snap := *e.j
		changed := f.changed
		f.mu.Unlock()
		if snap.State.Terminal() {
			return &snap, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return &snap, ctx.Err()
		}
	}
}

// Subscribe implements api.JobService.
func (f *Fake) Subscribe(ctx context.Context, tenant, id string) (<-chan job.Event, error) {
	f.mu.Lock()
	_, err := f.lookupLocked(tenant, id)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ch := make(chan job.Event)
	go func() {
		defer close(ch)
		sent := 0
		for {
			f.mu.Lock()
			e := f.jobs[id]
			pending := append([]job.Event(nil), e.events[sent:]...)
			changed := f.changed
			f.mu.Unlock()
			for _, ev := range pending {
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				sent++
				if ev.Type == job.EventFinished {
					return
				}
			}
			if len(pending) > 0 {
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Registry implements api.JobService.
func (f *Fake) Registry() *tools.Registry { return f.Reg }

// QueueRetryAfter implements api.JobService.
func (f *Fake) QueueRetryAfter() int { return f.RetryAfter }
