// Package wire holds the JSON shapes of sandboxd's HTTP API (see
// api/openapi.yaml): the server (package api) renders and decodes these
// types, and the Go client (api/client) sends and reads them, so there is
// one shape per concept. It imports only the standard library, so a
// program importing the client does not pull in the daemon.
package wire

import (
	"encoding/json"
	"time"
)

// JobState is where a job stands: queued → running → succeeded | failed |
// cancelled (pending_approval while a human decides).
type JobState string

// Job states.
const (
	StateQueued          JobState = "queued"
	StatePendingApproval JobState = "pending_approval"
	StateRunning         JobState = "running"
	StateSucceeded       JobState = "succeeded"
	StateFailed          JobState = "failed"
	StateCancelled       JobState = "cancelled"
)

// Terminal reports whether no further transition can happen.
func (s JobState) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Effect is one of the closed set of effects a tool may have: file_read,
// file_write, exec, http.
type Effect = string

// Limits are a job's or session's resource limits in the API's units;
// zero fields are omitted (the server's defaults).
type Limits struct {
	MemoryBytes   int64 `json:"memory_bytes,omitempty"`
	PIDs          int64 `json:"pids,omitempty"`
	CPUMillis     int64 `json:"cpu_millis,omitempty"`
	TimeoutMS     int64 `json:"timeout_ms,omitempty"`
	OutputBytes   int64 `json:"output_bytes,omitempty"`
	NoFile        int64 `json:"nofile,omitempty"`
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	DiskBytes     int64 `json:"disk_bytes,omitempty"`
	DiskInodes    int64 `json:"disk_inodes,omitempty"`
}

// SubmitRequest is the body of POST /v1/jobs. Either Tool (with optional
// Arguments, an object or a JSON string holding one, and CallID) or Call
// (a raw OpenAI, Anthropic or MCP tool call) is set.
type SubmitRequest struct {
	Tool           string          `json:"tool,omitempty"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	CallID         string          `json:"call_id,omitempty"`
	Call           json.RawMessage `json:"call,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Limits         *Limits         `json:"limits,omitempty"`
	SessionID      string          `json:"session_id,omitempty"`
	// CallbackURL is POSTed {"type":"job.finished","job":{...}} when the
	// job finishes.
	CallbackURL string `json:"callback_url,omitempty"`
	// Tags and Metadata label the job (the server bounds them: labels.*).
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Job is a job as GET /v1/jobs/{id} shows it.
type Job struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	Tool           string          `json:"tool"`
	CallID         string          `json:"call_id"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Runner         string          `json:"runner,omitempty"`
	SessionID      string          `json:"session_id,omitempty"`
	Limits         Limits          `json:"limits"`
	State          JobState        `json:"state"`
	Reason         string          `json:"reason,omitempty"`
	Result         *Result         `json:"result,omitempty"`
	Attempts       int             `json:"attempts"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// Guard is the guard's decision; absent when the tenant has no policy.
	Guard *Guard `json:"guard,omitempty"`
	// Egress audits the sandbox's outbound connections (http effect).
	Egress []EgressRecord `json:"egress,omitempty"`
	// Callback is the completion webhook and its delivery attempts.
	Callback *Callback `json:"callback,omitempty"`
	// Tags and Metadata are the client's labels ([] and {} for none).
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
	// Cached: answered from the result cache (nothing ran, no budget).
	Cached bool `json:"cached,omitempty"`
	// Hooks are the tool hooks' requests and outcomes.
	Hooks []HookRecord `json:"hooks,omitempty"`
}

// HookRecord is one tool hook's request and outcome on a job.
type HookRecord struct {
	Phase string `json:"phase"` // before or after
	URL   string `json:"url"`
	// Outcome: allow, deny, rewrite, redact, pass (after, unchanged), or
	// error (the hook failed; FailOpen says what that meant).
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason,omitempty"`
	Error      string    `json:"error,omitempty"`
	FailOpen   bool      `json:"fail_open,omitempty"`
	Status     int       `json:"status,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	Time       time.Time `json:"time"`
}

// JobList is a page of GET /v1/jobs.
type JobList struct {
	Jobs       []*Job `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

// Result is what a tool call returned.
type Result struct {
	OK bool `json:"ok"`
	// Content is the text the model reads.
	Content string `json:"content"`
	// Error explains a failure in words a model can act on.
	Error string `json:"error,omitempty"`
	// Artifacts are files or images for the program (GET URL serves each).
	Artifacts []Artifact `json:"artifacts,omitempty"`
	Usage     Usage      `json:"usage"`
	// Effects are the effects this call actually spent.
	Effects []Effect `json:"effects,omitempty"`
	// Process carries exit details for sandboxed tools.
	Process *Process `json:"process,omitempty"`
	// Truncated is set when the output was cut by an output cap.
	Truncated bool `json:"truncated,omitempty"`
	// Value is the repr() of a session python_repl cell's trailing
	// expression ("" when none or None); Content has it printed too.
	Value string `json:"value,omitempty"`
}

// Artifact is a file produced by a tool.
type Artifact struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	URL      string `json:"url,omitempty"`
	// Data is set only before the server stored the artifact.
	Data []byte `json:"data,omitempty"`
}

// Usage is what a call consumed.
type Usage struct {
	WallMS     int64 `json:"wall_ms"`
	CPUMS      int64 `json:"cpu_ms,omitempty"`
	PeakMemory int64 `json:"peak_memory_bytes,omitempty"`
	BytesIn    int64 `json:"bytes_in,omitempty"`
	BytesOut   int64 `json:"bytes_out,omitempty"`
}

// Process is how a sandboxed process ended.
type Process struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	OOMKilled       bool   `json:"oom_killed,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	ForkLoop        bool   `json:"fork_loop,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	MemoryLimit     int64  `json:"memory_limit_bytes,omitempty"`
	PIDsLimit       int64  `json:"pids_limit,omitempty"`
}

// Guard is the guard's decision on a job.
type Guard struct {
	Outcome   string      `json:"outcome"`
	Code      string      `json:"code,omitempty"`
	Rule      string      `json:"rule"`
	Reason    string      `json:"reason,omitempty"`
	Remaining []Remaining `json:"remaining"`
	Refunded  bool        `json:"refunded"`
	DecidedAt time.Time   `json:"decided_at"`
	// RetryAt and RetryAfterMS say when a refused call may pass on a
	// retry (rate_limited, budget_exhausted).
	RetryAt      *time.Time `json:"retry_at,omitempty"`
	RetryAfterMS int64      `json:"retry_after_ms,omitempty"`
	// ApprovalID is the approval a pending call waits for.
	ApprovalID string `json:"approval_id,omitempty"`
}

// Remaining is what is left of one guard budget.
type Remaining struct {
	Rule      string     `json:"rule"`
	Effect    string     `json:"effect,omitempty"`
	Tool      string     `json:"tool,omitempty"`
	Scope     string     `json:"scope"`
	Limit     int64      `json:"limit"`
	Remaining int64      `json:"remaining"`
	ResetsAt  *time.Time `json:"resets_at,omitempty"`
}

// EgressRecord is one decision of the egress proxy.
type EgressRecord struct {
	Time     time.Time `json:"time"`
	Method   string    `json:"method"`
	Host     string    `json:"host"`
	Port     int       `json:"port"`
	IP       string    `json:"ip,omitempty"`
	Allowed  bool      `json:"allowed"`
	Rule     int       `json:"rule"`
	Reason   string    `json:"reason,omitempty"`
	BytesOut int64     `json:"bytes_out"`
	BytesIn  int64     `json:"bytes_in"`
}

// Callback is a completion webhook and its delivery attempts.
type Callback struct {
	URL      string            `json:"url"`
	State    string            `json:"state"`
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
}

// CallbackAttempt is one delivery of a callback.
type CallbackAttempt struct {
	At         time.Time `json:"at"`
	DurationMS int64     `json:"duration_ms"`
	Status     int       `json:"status,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// Event types of GET /v1/jobs/{id}/events.
const (
	EventQueued          = "queued"
	EventPendingApproval = "pending_approval"
	EventStarted         = "started"
	EventStdout          = "stdout"
	EventStderr          = "stderr"
	EventFinished        = "finished"
	// EventKilled: the process was killed at its deadline (persisted).
	EventKilled = "killed"
)

// Event is one step of a job's life (the data of one server-sent event).
type Event struct {
	Seq  int       `json:"seq"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	// Data is the output chunk of stdout/stderr events.
	Data string `json:"data,omitempty"`
	// Job is the job's snapshot on queued, started and finished events.
	Job *Job `json:"job,omitempty"`
}

// Timeline is GET /v1/jobs/{id}/timeline.
type Timeline struct {
	JobID     string          `json:"job_id"`
	State     JobState        `json:"state"`
	Entries   []TimelineEntry `json:"entries"`
	QueuedMS  *float64        `json:"queued_ms,omitempty"`
	RunMS     *float64        `json:"run_ms,omitempty"`
	TotalMS   float64         `json:"total_ms"`
	Truncated bool            `json:"truncated,omitempty"`
}

// TimelineEntry is one step of a Timeline.
type TimelineEntry struct {
	Type        string    `json:"type"`
	Seq         int       `json:"seq"`
	Time        time.Time `json:"time"`
	DurationMS  float64   `json:"duration_ms"`
	Chunks      int       `json:"chunks,omitempty"`
	StdoutBytes int       `json:"stdout_bytes,omitempty"`
	StderrBytes int       `json:"stderr_bytes,omitempty"`
}

// Tool is a tool in sandboxd's own shape (GET /v1/tools without ?format).
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Effects      []Effect        `json:"effects"`
	ParallelSafe bool            `json:"parallel_safe"`
	Idempotent   bool            `json:"idempotent,omitempty"`
	// ReturnDirect: the tool's result is the agent's final answer.
	ReturnDirect bool   `json:"return_direct"`
	Source       string `json:"source,omitempty"`
	// Available is false while the tool cannot be called (its provider is
	// restarting); Unavailable says why.
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
}

// ToolList is GET /v1/tools: Tools are Tool values in sandboxd's shape,
// else the exported format's (openai, anthropic, mcp).
type ToolList struct {
	Tools []json.RawMessage `json:"tools"`
	// Sources are the tool sources and their state (sandboxd's shape only).
	Sources []json.RawMessage `json:"sources,omitempty"`
}

// SessionState is where a session stands: creating → active → closed, or
// failed.
type SessionState string

// Session states.
const (
	SessionCreating SessionState = "creating"
	SessionActive   SessionState = "active"
	SessionClosed   SessionState = "closed"
	SessionFailed   SessionState = "failed"
)

// SessionRequest is the body of POST /v1/sessions; zero fields take the
// server's defaults.
type SessionRequest struct {
	Image              string   `json:"image,omitempty"`
	Effects            []Effect `json:"effects,omitempty"`
	Limits             *Limits  `json:"limits,omitempty"`
	TTLSeconds         int64    `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds int64    `json:"idle_timeout_seconds,omitempty"`
	// Tags and Metadata label the session (bounded by labels.*).
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Session is a session as GET /v1/sessions/{id} shows it.
type Session struct {
	ID                 string       `json:"id"`
	Tenant             string       `json:"tenant"`
	Image              string       `json:"image"`
	Effects            []Effect     `json:"effects"`
	Limits             Limits       `json:"limits"`
	State              SessionState `json:"state"`
	Reason             string       `json:"reason"`
	TTLSeconds         int64        `json:"ttl_seconds"`
	IdleTimeoutSeconds int64        `json:"idle_timeout_seconds"`
	CreatedAt          time.Time    `json:"created_at"`
	ExpiresAt          time.Time    `json:"expires_at"`
	LastUsedAt         time.Time    `json:"last_used_at"`
	ClosedAt           *time.Time   `json:"closed_at,omitempty"`
	// Sandbox is the session's sandbox while the answering process holds
	// it open.
	Sandbox string `json:"sandbox,omitempty"`
	// Tags and Metadata are the client's labels ([] and {} for none).
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
}

// SessionList is a page of GET /v1/sessions.
type SessionList struct {
	Sessions   []*Session `json:"sessions"`
	NextCursor string     `json:"next_cursor"`
}

// FileInfo is one entry of a workspace directory listing (and the answer
// of PUT /v1/sessions/{id}/files/{path}).
type FileInfo struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// FileList is a directory's listing (GET of a directory).
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// ArchiveResult is the answer of POST /v1/sessions/{id}/archive.
type ArchiveResult struct {
	Entries int `json:"entries"`
}

// Approval is a request for a human to allow one job.
type Approval struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	JobID          string          `json:"job_id"`
	SessionID      string          `json:"session_id,omitempty"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Effects        []Effect        `json:"effects"`
	Rule           string          `json:"rule"`
	Reason         string          `json:"reason,omitempty"`
	State          string          `json:"state"` // pending, approved, denied, expired
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
}

// ApprovalList is a page of GET /v1/approvals.
type ApprovalList struct {
	Approvals  []*Approval `json:"approvals"`
	NextCursor string      `json:"next_cursor"`
}

// Decision is the body of POST /v1/approvals/{id}.
type Decision struct {
	Decision string `json:"decision"` // approve | deny
	Reason   string `json:"reason,omitempty"`
}

// Batch states of a turn.
const (
	BatchPendingApproval = "pending_approval"
	BatchRunning         = "running"
	BatchCompleted       = "completed"
)

// Batch is one model turn's calls (POST /v1/tool-calls, GET
// /v1/tool-calls/{id}): the next turn's messages in the turn's dialect
// (Text and Final for ReAct) and sandboxd's record of every call.
type Batch struct {
	ID        string            `json:"id"`
	State     string            `json:"state"`
	Dialect   string            `json:"dialect"`
	Mode      string            `json:"mode"`
	SessionID string            `json:"session_id,omitempty"`
	Messages  []json.RawMessage `json:"messages,omitempty"`
	Text      *string           `json:"text,omitempty"`
	Final     *string           `json:"final_answer,omitempty"`
	// ReturnDirect: a call of a return_direct tool succeeded; its answer
	// is Final and the agent loop stops (no next model turn).
	ReturnDirect bool           `json:"return_direct"`
	Calls        []CallRecord   `json:"calls"`
	Effects      map[string]int `json:"effects"`
	CreatedAt    time.Time      `json:"created_at"`
	Finished     *time.Time     `json:"finished_at,omitempty"`
	Note         string         `json:"note,omitempty"`
	Callback     *Callback      `json:"callback,omitempty"`
	// Tags and Metadata are the turn's labels, on every call's job too.
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
}

// CallRecord is sandboxd's record of one call of a batch.
type CallRecord struct {
	CallID      string `json:"call_id"`
	GeneratedID bool   `json:"call_id_generated,omitempty"`
	Tool        string `json:"tool"`
	// ReturnDirect: the tool's result is the agent's final answer.
	ReturnDirect bool `json:"return_direct,omitempty"`
	// Cached: answered from the result cache (nothing ran).
	Cached     bool       `json:"cached,omitempty"`
	JobID      string     `json:"job_id,omitempty"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	OK         bool       `json:"ok"`
	Error      string     `json:"error,omitempty"`
	Details    []Problem  `json:"details,omitempty"`
	Attempts   int        `json:"attempts,omitempty"`
	Effects    []Effect   `json:"effects,omitempty"`
	Usage      *Usage     `json:"usage,omitempty"`
	Artifacts  []Artifact `json:"artifacts,omitempty"`
	Guard      *Guard     `json:"guard,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Content is the answer the model reads for this call.
	Content string `json:"content"`
	IsError bool   `json:"is_error"`
}

// Problem is one problem of a request (a validation error's field).
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error ErrorPayload `json:"error"`
}

// ErrorPayload is an error's code, message and details.
type ErrorPayload struct {
	Code      string    `json:"code"`
	Message   string    `json:"message"`
	Details   []Problem `json:"details,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
}
