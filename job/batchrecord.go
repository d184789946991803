package job

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// BatchRecord is a batch (turn.go) as the store keeps it: only what its
// calls' jobs cannot give back. The calls' states, results, answers and
// the effects spent are read from the jobs whenever the batch is asked
// for, so a batch is written twice in its life: before Submit answers
// (every runnable call's job ID reserved then) and when it completes.
type BatchRecord struct {
	ID     string
	Tenant string
	// IdempotencyKey is the client's key ("" when none): unique per
	// tenant, like a job's.
	IdempotencyKey string
	SessionID      string
	Dialect        tools.Dialect
	Mode           string
	// State is BatchCompleted once every call is answered; before, the
	// state written at Submit (the jobs say where it stands now).
	State      BatchState
	CreatedAt  time.Time
	FinishedAt *time.Time
	// Calls are the turn's calls in order.
	Calls       []BatchCall
	FinalAnswer string
	HasFinal    bool
	Tags        []string
	Metadata    map[string]string
	// Callback is the batch's completion webhook and its deliveries.
	Callback *Callback
}

// BatchCall is one call of a BatchRecord.
type BatchCall struct {
	CallID      string `json:"call_id"`
	GeneratedID bool   `json:"call_id_generated,omitempty"`
	Tool        string `json:"tool"`
	// ReturnDirect: tools.Tool.ReturnDirect of the call's tool.
	ReturnDirect bool `json:"return_direct,omitempty"`
	// JobID is the job that runs the call, reserved before the batch is
	// written: a call whose job is not in the store was not submitted
	// yet (its turn had not come when the process stopped). "" for a
	// call answered without a job (Answer).
	JobID string `json:"job_id,omitempty"`
	// Arguments are the prepared arguments of a call that runs: what
	// submitting it after a restart needs.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Decision is the guard's decision of a call that runs, when the store
	// spent its units already (a shared guard: DecideBatch on an
	// AtomicSpender): a batch resumed before the call was submitted runs
	// it on this decision instead of deciding, and spending, again. nil
	// on the in-memory guard (its counts are restored from the jobs, which
	// do not have these, so a resumed batch decides again) and once the
	// units went back (a graceful stop, abandon).
	Decision *BatchDecision `json:"decision,omitempty"`
	// A call answered without a job (invalid, or refused at submission):
	// its state (CallInvalid), error, problems and the model's answer.
	State   string          `json:"state,omitempty"`
	Error   string          `json:"error,omitempty"`
	Details []tools.Problem `json:"details,omitempty"`
	Answer  string          `json:"answer,omitempty"`
}

// BatchDecision is a BatchCall's spent decision (policy.Decision less
// what only a decision being spent needs).
type BatchDecision struct {
	Outcome   policy.Outcome     `json:"outcome"`
	Rule      string             `json:"rule,omitempty"`
	Reason    string             `json:"reason,omitempty"`
	Remaining []policy.Remaining `json:"remaining,omitempty"`
	Spend     []policy.Spend     `json:"spend,omitempty"`
}

// spentDecision is the BatchDecision of d, which the store spent.
func spentDecision(d policy.Decision) *BatchDecision {
	return &BatchDecision{Outcome: d.Outcome, Rule: d.Rule, Reason: d.Reason,
		Remaining: slices.Clone(d.Remaining), Spend: slices.Clone(d.Spend)}
}

// decision is the policy.Decision to submit the call with (its units
// spent: SubmitRequest.Decision).
func (d *BatchDecision) decision() policy.Decision {
	return policy.Decision{Outcome: d.Outcome, Rule: d.Rule, Reason: d.Reason,
		Remaining: slices.Clone(d.Remaining), Spend: slices.Clone(d.Spend)}
}

// JobIDs are the record's job IDs in call order (what retention ties
// the batch to).
func (r *BatchRecord) JobIDs() []string {
	var out []string
	for _, c := range r.Calls {
		if c.JobID != "" {
			out = append(out, c.JobID)
		}
	}
	return out
}
