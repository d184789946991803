package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// ErrBatchNotFound is ErrNotFound for batches (errors.Is matches both).
var ErrBatchNotFound error = notFoundError("batch not found")

// Turns executes the tool calls of one model turn (a batch) on top of the
// service's Submit, Wait and the guard: what an agent framework's tool node
// does in-process, with sandboxd's guarantees.
//
//  1. Every call is resolved and its arguments repaired and validated; a
//     call that cannot run (unknown tool, bad arguments, a ReAct format
//     problem) gets an error answer saying which field and what was
//     expected, and the others go on.
//  2. The guard decides the whole batch before anything runs
//     (DecideBatch). A denied or over-budget call is recorded failed and
//     its answer says why; the others go on. When any call needs approval
//     the whole batch waits (BatchPendingApproval) until every approval is
//     decided; a denied or expired one answers with that, the rest run.
//  3. The calls run concurrently, at most TurnConfig.Concurrency at once,
//     when every tool that runs is parallel-safe in this context
//     (tools.Tool.ParallelIn: outside a session); otherwise one at a time
//     in the batch's order. In a session they keep the session's order.
//  4. Infrastructure failures are retried when that is safe (retry.go).
//  5. Each call's answer is tools.AnswerText of its job's result
//     (artifacts named, never inlined); the batch sums the effects spent.
//
// A batch is recorded in the store (BatchRecord, turn_store.go) before
// Submit answers, with its calls' job IDs reserved, and again when it
// completes; what its calls did is read from their jobs. A process that
// starts resumes the batches a stopped one left unfinished (Recover), and
// Get answers from the store a batch this process does not hold (after a
// restart, made by another replica, or past TurnConfig.Keep in memory).
type Turns struct {
	s   *Service
	cfg TurnConfig

	mu      sync.Mutex
	batches map[string]*Batch
	order   []string          // batch IDs, oldest first
	byKey   map[string]string // tenant + "\x00" + idempotency key → batch ID
}

// TurnConfig configures the turn executor. Zero fields take defaults.
type TurnConfig struct {
	// Concurrency bounds the calls of one batch running at once. Default 8.
	Concurrency int
	// Keep is how long a finished batch stays readable. Default 1h.
	Keep time.Duration
	// MaxBatches bounds the batches kept in memory (the oldest finished
	// go first). Default 10000.
	MaxBatches int
}

func (c *TurnConfig) withDefaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Keep <= 0 {
		c.Keep = time.Hour
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 10000
	}
}

// NewTurns returns the turn executor of s; zero fields of cfg take the
// service's Config.Turns.
func NewTurns(s *Service, cfg TurnConfig) *Turns {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = s.cfg.Turns.Concurrency
	}
	if cfg.Keep == 0 {
		cfg.Keep = s.cfg.Turns.Keep
	}
	cfg.withDefaults()
	return &Turns{s: s, cfg: cfg, batches: map[string]*Batch{}, byKey: map[string]string{}}
}

// BatchState is where a batch stands.
type BatchState string

const (
	// BatchPendingApproval: a call needs a human; nothing has run.
	BatchPendingApproval BatchState = "pending_approval"
	BatchRunning         BatchState = "running"
	// BatchCompleted: every call has its answer.
	BatchCompleted BatchState = "completed"
)

// Batch modes: how its calls run.
const (
	ModeParallel = "parallel" // concurrently, bounded
	ModeSerial   = "serial"   // one at a time, in order
	ModeSession  = "session"  // in the session, in its order
)

// Call states that are not job states.
const (
	// CallInvalid: the call could not be run at all (no job).
	CallInvalid = "invalid"
	// CallHeld: allowed, waiting for its batch (an approval elsewhere in
	// the batch, or its turn in a serial batch); no job yet.
	CallHeld = "held"
)

// Batch is one turn's calls and their outcome.
type Batch struct {
	ID        string        `json:"id"`
	Tenant    string        `json:"tenant"`
	SessionID string        `json:"session_id,omitempty"`
	Dialect   tools.Dialect `json:"dialect"`
	State     BatchState    `json:"state"`
	Mode      string        `json:"mode"`
	Calls     []CallRecord  `json:"calls"`
	// Effects sums, by effect, what the calls that ran spent (one unit per
	// call and effect: what a guard budget counts).
	Effects map[tools.Effect]int `json:"effects"`
	// FinalAnswer is a ReAct turn's final answer (nothing ran).
	FinalAnswer string     `json:"final_answer,omitempty"`
	HasFinal    bool       `json:"has_final_answer,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// Callback is the batch's completion webhook and its delivery
	// attempts (nil: none asked for).
	Callback *Callback `json:"callback,omitempty"`
	// Tags and Metadata are the turn's labels; every call's job carries
	// them.
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`

	key  string // the client's idempotency key
	done chan struct{}
	mu   *sync.Mutex // guards the mutable fields while it runs
	// rec is what the store keeps (under mu); saveMu orders its writes.
	rec    *BatchRecord
	saveMu *sync.Mutex
}

// CallRecord is sandboxd's own record of one call of a batch.
type CallRecord struct {
	CallID      string `json:"call_id"`
	GeneratedID bool   `json:"call_id_generated,omitempty"`
	// Tool is the canonical name (the model's spelling when unknown).
	Tool string `json:"tool"`
	// ReturnDirect: the tool's result is the agent's final answer
	// (tools.Tool.ReturnDirect).
	ReturnDirect bool `json:"return_direct,omitempty"`
	// Cached: the answer came from the result cache (Job.Cached).
	Cached bool   `json:"cached,omitempty"`
	JobID  string `json:"job_id,omitempty"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// Details name the fields of invalid arguments and what was expected.
	Details   []tools.Problem  `json:"details,omitempty"`
	Attempts  int              `json:"attempts,omitempty"`
	Effects   []tools.Effect   `json:"effects,omitempty"`
	Usage     *tools.Usage     `json:"usage,omitempty"`
	Artifacts []tools.Artifact `json:"artifacts,omitempty"`
	// Guard is the guard's decision (outcome, rule, reason).
	Guard      *GuardRecord `json:"guard,omitempty"`
	StartedAt  *time.Time   `json:"started_at,omitempty"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`
	// Answer is what the model reads (TurnMessages renders it).
	Answer  string `json:"-"`
	IsError bool   `json:"-"`
}

// DirectAnswer is the answer of the first call, in call order, of a
// return_direct tool that succeeded: the agent's final answer, so the
// loop stops there. ok is false when there is none (or the batch is not
// completed).
func (b *Batch) DirectAnswer() (answer string, ok bool) {
	if b.State != BatchCompleted {
		return "", false
	}
	for _, c := range b.Calls {
		if c.ReturnDirect && c.OK && !c.IsError {
			return c.Answer, true
		}
	}
	return "", false
}

// Answers are the batch's answers in call order, for tools.TurnMessages.
func (b *Batch) Answers() []tools.Answer {
	out := make([]tools.Answer, len(b.Calls))
	for i, c := range b.Calls {
		out[i] = tools.Answer{CallID: c.CallID, Name: c.Tool, Content: c.Answer, IsError: c.IsError}
	}
	return out
}

// TurnRequest is one turn to execute.
type TurnRequest struct {
	Turn tools.Turn
	// SessionID runs the calls in a session (overrides Turn.SessionID).
	SessionID string
	// CallbackURL, when set, is POSTed the batch when every call is
	// answered (overrides Turn.CallbackURL; callback.go); checked at
	// Submit (ErrInvalid).
	CallbackURL string
	// IdempotencyKey, when set, makes each call's job idempotent under
	// "turn:<key>:<call id>": a turn sent again with the same key and the
	// model's call ids gets the same jobs, never runs a call twice.
	IdempotencyKey string
	// Tags and Metadata label the batch and its calls' jobs (override
	// Turn.Tags and Turn.Metadata when set; bounded by Config.Labels).
	Tags     []string
	Metadata map[string]string
}

// pendingCall is a call that will run (or wait for approval) and what the
// batch knows about it.
type pendingCall struct {
	i    int // index in Batch.Calls
	call tools.Call
	tool *tools.Tool
	// args are call's arguments as Prepare decoded them (nil for a call
	// resumed from the store: Submit prepares it).
	args     map[string]any
	decision policy.Decision
	jobID    string // set once submitted
	// reserved is the job ID the call's job gets (BatchCall.JobID).
	reserved string
	// resumed: its job was submitted by a process that stopped (Recover);
	// it runs (or has run) whatever the decision was.
	resumed bool
}

// Submit starts executing a turn and returns the batch as it stands: every
// call decided by the guard and, unless an approval holds the batch,
// running. Errors: ErrShutdown; with a session, ErrSessionNotFound and
// ErrSessionClosed (the turn is refused whole: no call runs).
func (t *Turns) Submit(ctx context.Context, tenant string, req TurnRequest) (*Batch, error) {
	s := t.s
	if tenant == "" {
		return nil, fmt.Errorf("%w: empty tenant", ErrInvalid)
	}
	session := req.SessionID
	if session == "" {
		session = req.Turn.SessionID
	}
	if session != "" {
		if _, err := s.activeSession(ctx, tenant, session); err != nil {
			return nil, err
		}
	}
	callback := req.CallbackURL
	if callback == "" {
		callback = req.Turn.CallbackURL
	}
	if callback != "" {
		if err := s.checkCallbackURL(tenant, callback); err != nil {
			return nil, err
		}
	}
	tags, md := req.Tags, req.Metadata
	if tags == nil {
		tags = req.Turn.Tags
	}
	if md == nil {
		md = req.Turn.Metadata
	}
	tags, md, err := checkLabels(s.cfg.Labels, "the turn", tags, md)
	if err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrShutdown
	}
	if req.IdempotencyKey != "" {
		if b, err := t.byIdempotencyKey(ctx, tenant, req.IdempotencyKey); b != nil || err != nil {
			return b, err
		}
	}
	now := time.Now().UTC()
	b := &Batch{
		ID: ids.At("tc_", now), Tenant: tenant, SessionID: session, Dialect: req.Turn.Dialect,
		State: BatchRunning, Calls: make([]CallRecord, len(req.Turn.Calls)), Effects: map[tools.Effect]int{},
		FinalAnswer: req.Turn.FinalAnswer, HasFinal: req.Turn.HasFinal, CreatedAt: now,
		Tags: tags, Metadata: md,
		key: req.IdempotencyKey, done: make(chan struct{}), mu: &sync.Mutex{}, saveMu: &sync.Mutex{},
	}
	if callback != "" {
		b.Callback = &Callback{URL: callback, State: CallbackPending}
	}

	// 1. Resolve and validate every call.
	var run []*pendingCall
	for i, tc := range req.Turn.Calls {
		rec := &b.Calls[i]
		rec.CallID, rec.GeneratedID, rec.Tool = tc.ID, tc.GeneratedID, tc.Name
		if tc.Problem != nil {
			invalid(rec, tc.Problem)
			continue
		}
		c := tc.Call
		if tc.Text {
			if tool, ok := s.reg.Lookup(c.Name); ok {
				var text string
				if json.Unmarshal(c.Arguments, &text) == nil {
					c.Arguments = tools.ReActArguments(tool, text)
				}
			}
		}
		prepared, tool, args, err := s.reg.Prepare(c)
		if err != nil {
			invalid(rec, err)
			continue
		}
		rec.Tool, rec.ReturnDirect = tool.Name, tool.ReturnDirect
		if !tool.Runnable() {
			invalid(rec, fmt.Errorf("tool %s is a declaration only and cannot run", tool.Name))
			continue
		}
		run = append(run, &pendingCall{i: i, call: prepared, tool: tool, args: args, reserved: ids.At("job_", now)})
	}

	// 2. The guard decides the whole batch before anything runs.
	ts := make([]*tools.Tool, len(run))
	for k, pc := range run {
		ts[k] = pc.tool
	}
	for k, d := range s.DecideBatch(tenant, session, ts) {
		run[k].decision = d
	}
	b.Mode = t.mode(session, run)

	// 3. The batch is recorded before any of its jobs: a stop from here on
	// leaves it for the next process to resume.
	b.rec = newRecord(b, run, s.atomic != nil && s.guardEnabled(tenant))
	if err := s.st.CreateBatch(ctx, b.rec); err != nil {
		for _, pc := range run {
			s.RefundDecision(&pc.decision)
		}
		if req.IdempotencyKey != "" && errors.Is(err, ErrConflict) { // the same turn, sent twice at once
			if b, err := t.byIdempotencyKey(ctx, tenant, req.IdempotencyKey); b != nil || err != nil {
				return b, err
			}
		}
		return nil, fmt.Errorf("record batch: %w", err)
	}

	var ready, pending []*pendingCall
	for _, pc := range run {
		rec := &b.Calls[pc.i]
		switch pc.decision.Outcome {
		case policy.OutcomeDeny:
			t.submit(ctx, b, pc, false, false)
		case policy.OutcomeConfirm:
			t.submit(ctx, b, pc, true, false)
			if rec.JobID != "" && rec.State == string(StatePendingApproval) {
				pending = append(pending, pc)
			}
		default:
			rec.State = CallHeld
			rec.Guard = s.record(&Job{Tenant: tenant}, pc.decision, now)
			ready = append(ready, pc)
		}
	}
	// Approved calls run in the batch's order among the allowed ones.
	if len(pending) > 0 {
		b.State = BatchPendingApproval
	}
	t.add(b)
	snap := b.snapshot()
	go t.execute(b, run, ready, pending)
	return snap, nil
}

// mode decides how the batch's runnable calls run.
func (t *Turns) mode(session string, run []*pendingCall) string {
	if session != "" {
		return ModeSession
	}
	for _, pc := range run {
		if !pc.tool.ParallelIn(false) {
			return ModeSerial
		}
	}
	return ModeParallel
}

// submit submits pc with its decision, as the job ID it reserved: deny and
// confirm at once (the job is recorded failed, or pending approval and
// held), allow when it is the call's time to run. A refusal is the call's
// answer, recorded with the batch; with stopping, ErrShutdown is returned
// unrecorded instead (the next process submits the call).
func (t *Turns) submit(ctx context.Context, b *Batch, pc *pendingCall, hold, stopping bool) error {
	s := t.s
	d := pc.decision
	req := SubmitRequest{Call: pc.call, SessionID: b.SessionID, Decision: &d, Hold: hold, Retry: true,
		Tags: b.Tags, Metadata: b.Metadata, JobID: pc.reserved}
	if pc.args != nil {
		req.prepared = &preparedCall{call: pc.call, tool: pc.tool, args: pc.args}
	}
	if key := t.callKey(b, pc); key != "" {
		req.IdempotencyKey = key
	}
	j, created, err := s.Submit(ctx, b.Tenant, req)
	pc.decision.Spend = nil // Submit owns the reserved units now
	if err != nil && stopping && errors.Is(err, ErrShutdown) {
		return err
	}
	b.mu.Lock()
	rec := &b.Calls[pc.i]
	save := false
	if err != nil {
		failed(rec, err)
		b.rec.Calls[pc.i] = answered(rec)
		save = true
	} else {
		if !created {
			s.RefundDecision(&d) // the key's job exists: its own decision stands
		}
		pc.jobID = j.ID
		rec.JobID = j.ID
		fillRecord(rec, j)
		if j.ID != b.rec.Calls[pc.i].JobID { // the key's job, made before
			b.rec.Calls[pc.i].JobID = j.ID
			save = true
		}
	}
	b.mu.Unlock()
	if save {
		t.save(b)
	}
	return err
}

// callKey is the idempotency key of a call's job, "" without a batch key.
func (t *Turns) callKey(b *Batch, pc *pendingCall) string {
	key, _ := b.idempotencyKey()
	if key == "" {
		return ""
	}
	return "turn:" + key + ":" + pc.call.ID
}

// execute waits for the batch's approvals, then runs its calls. When the
// service stops first, the batch is left as the store has it, unfinished:
// the next process resumes it (Recover).
func (t *Turns) execute(b *Batch, run, ready, pending []*pendingCall) {
	s := t.s
	ctx, cancel := context.WithCancel(s.runCtx)
	defer cancel()
	if t.run(ctx, b, run, ready, pending) {
		t.finish(b)
	}
}

// run is execute's work; false: the service stopped before every call was
// answered.
func (t *Turns) run(ctx context.Context, b *Batch, run, ready, pending []*pendingCall) bool {
	s := t.s
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // stop waiting when the service shuts down
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	// Hold the whole batch until every approval is decided.
	approved := map[int]bool{}
	for _, pc := range pending {
		j, err := s.AwaitDecision(ctx, b.Tenant, pc.jobID)
		if err != nil {
			t.abandon(b, ready)
			return false
		}
		b.mu.Lock()
		fillRecord(&b.Calls[pc.i], j)
		b.mu.Unlock()
		if j.State == StateQueued {
			approved[pc.i] = true
		}
	}
	var todo []*pendingCall
	for _, pc := range run {
		if pc.decision.Outcome == policy.OutcomeAllow || approved[pc.i] || pc.resumed {
			todo = append(todo, pc)
		}
	}
	b.mu.Lock()
	b.State = BatchRunning
	b.mu.Unlock()
	if b.Mode == ModeParallel {
		sem := make(chan struct{}, t.cfg.Concurrency)
		var wg sync.WaitGroup
		var stopped atomic.Bool
		for _, pc := range todo {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				t.abandon(b, todo)
				wg.Wait()
				return false
			}
			wg.Go(func() {
				defer func() { <-sem }()
				if !t.runOne(ctx, b, pc) {
					stopped.Store(true)
				}
			})
		}
		wg.Wait()
		return !stopped.Load()
	}
	for k, pc := range todo {
		if ctx.Err() != nil || !t.runOne(ctx, b, pc) {
			t.abandon(b, todo[k:])
			return false
		}
	}
	return true
}

// runOne starts a call (Submit of an allowed call, Release of an approved
// one) and waits for its job. false: the service stopped first.
func (t *Turns) runOne(ctx context.Context, b *Batch, pc *pendingCall) bool {
	s := t.s
	if pc.jobID == "" {
		if err := t.submit(ctx, b, pc, false, true); errors.Is(err, ErrShutdown) {
			return false
		}
		if pc.jobID == "" {
			return true // refused at submission: the record says why
		}
	} else if _, err := s.Release(ctx, b.Tenant, pc.jobID); err != nil {
		if errors.Is(err, ErrShutdown) || ctx.Err() != nil {
			return false // still queued in the store: it runs at the next start
		}
		b.mu.Lock()
		failed(&b.Calls[pc.i], err)
		b.mu.Unlock()
		return true
	}
	j, err := s.Wait(ctx, b.Tenant, pc.jobID)
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := &b.Calls[pc.i]
	if j != nil {
		fillRecord(rec, j)
	}
	if err != nil && (j == nil || !j.State.Terminal()) {
		rec.OK, rec.IsError = false, true
		rec.Answer = "Error: sandboxd shut down before the call finished; it may have run. Check before calling it again."
		return false
	}
	return true
}

// abandon gives back the units reserved for calls that never got to run
// (the service is shutting down): the next process decides them again
// when it resumes the batch. A decision the store spent (BatchCall.Decision)
// is first taken out of the batch's record; when that write fails the
// units stay spent and the next process runs the call on the decision.
func (t *Turns) abandon(b *Batch, calls []*pendingCall) {
	var give []*pendingCall
	taken := map[int]*BatchDecision{}
	b.mu.Lock()
	for _, pc := range calls {
		if pc.jobID == "" && b.Calls[pc.i].State == CallHeld && len(pc.decision.Spend) > 0 {
			give = append(give, pc)
			if d := b.rec.Calls[pc.i].Decision; d != nil {
				taken[pc.i] = d
				b.rec.Calls[pc.i].Decision = nil
			}
		}
	}
	b.mu.Unlock()
	if len(taken) > 0 {
		if err := t.write(b); err != nil {
			b.mu.Lock()
			for i, d := range taken {
				b.rec.Calls[i].Decision = d
			}
			b.mu.Unlock()
			t.s.log.Warn("stopping: the guard's units of a batch's calls that did not run stay spent (the batch resumes on them)",
				"batch", b.ID, "calls", len(give), "err", err)
			return
		}
	}
	for _, pc := range give {
		t.s.RefundDecision(&pc.decision)
	}
}

// finish sums the effects and marks the batch completed.
// Waiters wake first; the record is written after.
func (t *Turns) finish(b *Batch) {
	b.mu.Lock()
	for _, c := range b.Calls {
		for _, e := range c.Effects {
			b.Effects[e]++
		}
	}
	now := time.Now().UTC()
	b.State, b.FinishedAt = BatchCompleted, &now
	b.rec.State, b.rec.FinishedAt = BatchCompleted, &now
	close(b.done)
	hasCallback := b.Callback != nil
	b.mu.Unlock()
	t.save(b)
	if hasCallback {
		t.s.hooks.Go(func() { t.deliver(b) })
	}
}

// deliver POSTs a finished batch to its callback URL; the attempts are
// kept in the batch, and recorded with it once the delivery ends.
func (t *Turns) deliver(b *Batch) {
	snap := b.snapshot()
	body, err := t.s.cfg.TurnCallbackBody(snap)
	if err != nil {
		t.s.log.Error("encode turn callback", "batch", b.ID, "err", err)
		return
	}
	t.s.deliverCallback(b.Tenant, b.ID, snap.Callback, "turn.finished", body, func(cb *Callback) {
		b.mu.Lock()
		b.Callback = cloneCallback(cb)
		b.rec.Callback = cloneCallback(cb)
		b.mu.Unlock()
		if cb.State != CallbackPending {
			t.save(b)
		}
	})
}

// invalid records a call that cannot run.
func invalid(rec *CallRecord, err error) {
	rec.State, rec.OK, rec.IsError = CallInvalid, false, true
	rec.Error = err.Error()
	var ve *tools.ValidationError
	if errors.As(err, &ve) {
		rec.Details = slices.Clone(ve.Problems)
	}
	rec.Answer = tools.ProblemText(rec.Tool, err)
}

// failed records a call the service refused to take.
func failed(rec *CallRecord, err error) {
	rec.State, rec.OK, rec.IsError = CallInvalid, false, true
	rec.Error = err.Error()
	rec.Answer = "Error: " + err.Error()
	if errors.Is(err, ErrShutdown) {
		rec.Answer = "Error: sandboxd is shutting down; the call did not run. Call it again later."
	}
}

// fillRecord copies what the job says into the call's record.
func fillRecord(rec *CallRecord, j *Job) {
	rec.JobID, rec.State, rec.Reason, rec.Attempts = j.ID, string(j.State), j.Reason, j.Attempts
	rec.Guard, rec.StartedAt, rec.FinishedAt, rec.Cached = j.Guard, j.StartedAt, j.FinishedAt, j.Cached
	switch {
	case j.State == StatePendingApproval:
		rec.Answer = "Error: the call is waiting for a human's approval"
		rec.IsError = true
	case j.State == StateQueued || j.State == StateRunning:
		rec.Answer = "Error: the call has not finished"
		rec.IsError = true
	case j.Result != nil:
		r := *j.Result
		rec.OK, rec.Error = r.OK, r.Error
		rec.Effects = slices.Clone(r.Effects)
		u := r.Usage
		rec.Usage = &u
		rec.Artifacts = slices.Clone(r.Artifacts)
		rec.Answer, rec.IsError = tools.AnswerText(r)
	default:
		rec.Answer, rec.IsError = "Error: the call ended without a result", true
	}
}

func (b *Batch) idempotencyKey() (string, bool) {
	return b.key, b.key != ""
}

// snapshot copies the batch for a caller.
func (b *Batch) snapshot() *Batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := *b
	c.Calls = make([]CallRecord, len(b.Calls))
	for i, r := range b.Calls {
		r.Details = slices.Clone(r.Details)
		r.Effects = slices.Clone(r.Effects)
		r.Artifacts = slices.Clone(r.Artifacts)
		c.Calls[i] = r
	}
	c.Callback = cloneCallback(b.Callback)
	c.Tags, c.Metadata = slices.Clone(b.Tags), maps.Clone(b.Metadata)
	c.Effects = make(map[tools.Effect]int, len(b.Effects))
	for k, v := range b.Effects {
		c.Effects[k] = v
	}
	return &c
}

// Done reports whether every call has its answer.
func (b *Batch) Done() bool { return b.State == BatchCompleted }

// byIdempotencyKey is the tenant's batch of that key, from memory or the
// store; nil (and no error) when there is none.
func (t *Turns) byIdempotencyKey(ctx context.Context, tenant, key string) (*Batch, error) {
	t.mu.Lock()
	b := t.batches[t.byKey[tenant+"\x00"+key]]
	t.mu.Unlock()
	if b != nil {
		return b.snapshot(), nil
	}
	rec, err := t.s.st.GetBatchByIdempotencyKey(ctx, tenant, key)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("batch by idempotency key: %w", err)
	}
	return t.load(ctx, rec), nil
}

// add keeps b, dropping finished batches past Keep or MaxBatches.
func (t *Turns) add(b *Batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batches[b.ID] = b
	t.order = append(t.order, b.ID)
	if b.key != "" {
		t.byKey[b.Tenant+"\x00"+b.key] = b.ID
	}
	cutoff := time.Now().Add(-t.cfg.Keep)
	for len(t.order) > 0 {
		old := t.batches[t.order[0]]
		if old == nil {
			t.order = t.order[1:]
			continue
		}
		old.mu.Lock()
		fin := old.FinishedAt
		old.mu.Unlock()
		if fin == nil || (fin.After(cutoff) && len(t.order) <= t.cfg.MaxBatches) {
			break
		}
		delete(t.batches, old.ID)
		if old.key != "" && t.byKey[old.Tenant+"\x00"+old.key] == old.ID {
			delete(t.byKey, old.Tenant+"\x00"+old.key)
		}
		t.order = t.order[1:]
	}
}

// Get returns a tenant's batch; another tenant's is ErrNotFound. A batch
// this process does not hold is read from the store (fromStore).
func (t *Turns) Get(ctx context.Context, tenant, id string) (*Batch, error) {
	t.mu.Lock()
	b := t.batches[id]
	t.mu.Unlock()
	if b == nil {
		return t.fromStore(ctx, tenant, id)
	}
	if b.Tenant != tenant {
		return nil, fmt.Errorf("%s: %w", id, ErrBatchNotFound)
	}
	return b.snapshot(), nil
}

// Wait blocks until the batch is completed or ctx ends (then it returns
// the current snapshot and ctx.Err()). A batch this process does not
// hold is read from the store every storePoll.
func (t *Turns) Wait(ctx context.Context, tenant, id string) (*Batch, error) {
	t.mu.Lock()
	b := t.batches[id]
	t.mu.Unlock()
	if b == nil {
		return t.waitStore(ctx, tenant, id)
	}
	if b.Tenant != tenant {
		return nil, fmt.Errorf("%s: %w", id, ErrBatchNotFound)
	}
	select {
	case <-b.done:
		return b.snapshot(), nil
	case <-ctx.Done():
		return b.snapshot(), ctx.Err()
	}
}
