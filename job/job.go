// Package job owns the lifecycle of tool calls: admission (bounded queue,
// worker pool, fair across tenants: sched.go), the guard's decisions and
// approvals, idempotency, durable records in a Store (the interface it
// defines, store.go), execution through a runner (retries: retry.go; the
// warm pool: pool.go), cancellation, events (persisted: eventsink.go),
// completion callbacks (callback.go), sessions, model turns (turn.go) and
// crash recovery. Its configuration is config's sections (config.go); its
// sentinel errors are all in errors.go.
package job

import (
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// State of a job. queued → running → succeeded | failed | cancelled.
type State string

const (
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// Terminal reports whether no further transition can happen.
// StatePendingApproval (approval.go) is not terminal.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Reasons recorded on failed or cancelled jobs.
const (
	ReasonLost      = "lost"      // the daemon died while the job ran
	ReasonCancelled = "cancelled" // a client cancelled it
	ReasonTimeout   = "timeout"
	ReasonToolError = "tool_error"
	ReasonInternal  = "internal"
	// ReasonUnavailable: the runner's daemon could not be reached;
	// ReasonDiskFull: the host's disk is full. Both are internal
	// failures whose cause is known (ErrUnavailable, ErrHostDiskFull).
	ReasonUnavailable = "unavailable"
	ReasonDiskFull    = "disk_full"
	ReasonShutdown    = "shutdown"
)

// Job is one tool call and its outcome.
type Job struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	Tool           string          `json:"tool"`
	CallID         string          `json:"call_id"`
	Args           json.RawMessage `json:"args"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Runner         string          `json:"runner,omitempty"`
	// SessionID is the session the job runs in ("" for a one-shot job).
	SessionID  string        `json:"session_id,omitempty"`
	Limits     runner.Limits `json:"limits"`
	State      State         `json:"state"`
	Reason     string        `json:"reason,omitempty"`
	Result     *tools.Result `json:"result,omitempty"`
	Attempts   int           `json:"attempts"`
	CreatedAt  time.Time     `json:"created_at"`
	StartedAt  *time.Time    `json:"started_at,omitempty"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
	// Guard is the guard's decision (nil when the tenant has no policy).
	Guard *GuardRecord `json:"guard,omitempty"`
	// Egress is the audit of the sandbox's outbound connections.
	Egress []EgressRecord `json:"egress,omitempty"`
	// Callback is the completion webhook and its delivery attempts (nil:
	// none was asked for); see callback.go.
	Callback *Callback `json:"callback,omitempty"`
	// Tags and Metadata are the client's labels (labels.go); a turn's
	// calls carry the turn's.
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Cached: the result came from the result cache (cache.go); the tool
	// did not run and the call spent no budget.
	Cached bool `json:"cached,omitempty"`
	// Hooks are the tool hooks' requests and outcomes (hooks.go).
	Hooks []HookRecord `json:"hooks,omitempty"`
	// Retry is SubmitRequest.Retry, kept with the job so that whichever
	// process runs it (a replica claiming it, the next process after a
	// restart) retries it the same way, and a retry-safe call its process
	// died running runs again instead of ending lost (retry.go).
	Retry bool `json:"retry,omitempty"`
}

// SubmitRequest is a validated-at-the-edge request to run one tool call.
type SubmitRequest struct {
	// Call is the model's tool call; Arguments may be a JSON string or an
	// object (tools.ParseCall repairs and validates it).
	Call           tools.Call
	IdempotencyKey string
	// Limits may ask for any value up to the operator's ceilings (zero
	// fields take the defaults); a value above a ceiling is an error
	// (ErrInvalid) naming it. A tool's own timeout argument asks for
	// Limits.Timeout the same way.
	Limits runner.Limits
	// SessionID, when set, runs the call in that session's sandbox.
	SessionID string
	// CallbackURL, when set, is POSTed the final record when the job ends
	// (callback.go); checked at Submit (ErrInvalid).
	CallbackURL string
	// Tags and Metadata label the job (bounded by Config.Labels:
	// ErrInvalid past a bound).
	Tags     []string
	Metadata map[string]string

	// The fields below are for in-process callers (the turn executor,
	// turn.go); the HTTP API never sets them.

	// Decision is the guard's decision already taken for this call: a
	// batch decides all of its calls before any of them runs
	// (DecideBatch). Submit records it instead of asking the guard and
	// owns its reserved units from then on (refunded when Submit fails).
	Decision *policy.Decision
	// Hold keeps a call that needs approval out of the queue once it is
	// approved: it waits, queued, until Release (a batch releases its
	// calls together, in its own order).
	Hold bool
	// JobID, when set, is the ID the job gets (a batch reserves its
	// calls' job IDs before it is recorded, turn.go); "" makes one.
	JobID string
	// Retry lets the service run the call again after an infrastructure
	// failure, up to Config.Turns.Retries times with exponential backoff, when
	// that is safe: the call provably never started, or its tool is
	// RetrySafe. Each attempt is counted in Job.Attempts.
	Retry bool
	// prepared is Call already resolved and validated by the turn executor
	// (Registry.Prepare), so Submit does not do it a second time.
	prepared *preparedCall
}

// preparedCall is what tools.Registry.Prepare returned for a call.
type preparedCall struct {
	call tools.Call
	tool *tools.Tool
	args map[string]any
}

// ListFilter selects jobs of one tenant (AllTenants: of every tenant),
// newest first.
type ListFilter struct {
	Tool  string
	State State
	// SessionID keeps the jobs of one session.
	SessionID string
	// Since and Until bound CreatedAt: Since <= CreatedAt < Until; zero:
	// no bound.
	Since, Until time.Time
	// LabelFilter keeps the jobs with every tag and metadata pair named.
	LabelFilter
	// Limit defaults to 50, at most 500.
	Limit int
	// Cursor is the opaque next-page token from a previous List.
	Cursor string
}

// EventType names a job event on the SSE stream.
type EventType string

const (
	EventQueued EventType = "queued"
	// EventPendingApproval: the job waits for a human (see Approval).
	EventPendingApproval EventType = "pending_approval"
	EventStarted         EventType = "started"
	EventStdout          EventType = "stdout"
	EventStderr          EventType = "stderr"
	EventFinished        EventType = "finished"
	// EventKilled: the process ran to its deadline (its started event's
	// time plus the timeout) and was killed; the event's time is when the
	// kill was sent.
	EventKilled EventType = "killed"
)

// Event is one step in a job's life.
type Event struct {
	Seq  int       `json:"seq"`
	Type EventType `json:"type"`
	Time time.Time `json:"time"`
	// Data is the output chunk for stdout/stderr events.
	Data string `json:"data,omitempty"`
	// Job is the job snapshot for queued/started/finished events.
	Job *Job `json:"job,omitempty"`
}
