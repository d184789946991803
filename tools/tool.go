// Package tools owns the Tool contract: what a model sees (name, description,
// JSON Schemas), what the guard counts (effect tags), how a model's call is
// parsed and validated, and the normalised result every tool returns.
//
// tools is a leaf package: it imports only the standard library, the JSON
// Schema library, internal/ids (call IDs) and internal/netclass (the
// address checks of http_request's options), both standard library only. Tools that must run inside a sandbox (exec effect) do not
// run themselves: they describe a Command and the job service runs it through
// a runner, then turns the process result back into a Result with
// FromProcess.
package tools

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/netclass"
)

// Effect is one thing a tool call may spend. The set is closed: a tool that
// declares any other effect is refused at registration.
type Effect string

const (
	EffectFileRead  Effect = "file_read"
	EffectFileWrite Effect = "file_write"
	EffectExec      Effect = "exec"
	EffectHTTP      Effect = "http"
)

// AllEffects lists the closed set in a stable order.
var AllEffects = []Effect{EffectFileRead, EffectFileWrite, EffectExec, EffectHTTP}

// Valid reports whether e is one of the closed set.
func (e Effect) Valid() bool {
	for _, x := range AllEffects {
		if e == x {
			return true
		}
	}
	return false
}

// Tool is the contract of one tool. Exactly one of Run or Command is set for
// a runnable tool; a tool with neither is a declaration only (schemas can be
// exported, calls are refused).
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Effects      []Effect        `json:"effects"`
	// ParallelSafe says the tool keeps no state of its own between calls:
	// all a call shares with another is the sandbox and workspace it runs
	// with. Outside a session every call gets its own (a fresh sandbox, a
	// fresh workspace), so calls of such tools in one batch may run at the
	// same time; in a session they share the session's and run one at a
	// time, in the session's order. False: calls share state wherever they
	// run (an MCP provider's long-lived process, a custom tool that says
	// so), and a batch containing one runs its calls in order. See
	// ParallelIn.
	ParallelSafe bool `json:"parallel_safe"`
	// Idempotent is the operator's word that a second call with the same
	// arguments does no more than the first: a call whose sandbox died
	// after it may have started is retried only when this is set or the
	// tool spends nothing beyond file_read (see RetrySafe).
	Idempotent bool `json:"idempotent,omitempty"`
	// ReturnDirect says the tool's result is the agent's final answer
	// (LangChain's return_direct, CrewAI's result_as_answer): the schema
	// exports carry it (x-return-direct) and a turn's answer flags a call
	// of it, so the agent loop stops instead of asking the model again.
	ReturnDirect bool `json:"return_direct,omitempty"`
	// Cache, when set, declares the tool's calls cacheable: an identical
	// call answers from the job service's result cache (job/cache.go)
	// without running or spending budget. The service refuses it for
	// tools with the exec or file_write effect, and for http unless
	// HTTPReadOnly.
	Cache *CachePolicy `json:"cache,omitempty"`

	// Run executes the tool in-process (calculator, http_request, file
	// tools). args has already been validated against InputSchema.
	Run func(ctx context.Context, env Env, args map[string]any) (Result, error) `json:"-"`

	// Command builds the process a sandboxed tool (exec effect) runs.
	// args has already been validated against InputSchema.
	Command func(args map[string]any) (Command, error) `json:"-"`

	// Describe, when set, is the description as true where the calls run
	// (in a session or not, what the image holds): the exports a caller
	// asks for a place (GET /v1/tools?session_id=) use it. Description
	// stays the one true everywhere.
	Describe func(Where) string `json:"-"`

	// Available, when set, says whether the tool can be called right now:
	// nil when it can, else why not (a provider restarting). Such a tool
	// stays listed (GET /v1/tools shows it unavailable) and its calls get
	// the reason as their error.
	Available func() error `json:"-"`
	// Image is the sandbox image of the tool's one-shot calls ("": the
	// runner's default); a call in a session runs in the session's.
	Image string `json:"image,omitempty"`
	// Limits are the tool's own defaults for its calls' limits (a tool
	// file's "limits"); zero fields keep the operator's. A call may ask
	// for others within the operator's ceilings.
	Limits Limits `json:"limits,omitzero"`
	// Source names where the tool comes from: "" for a built-in, "file:"
	// and a path for a tool from the tools directory, "provider:" and a
	// name for an MCP provider's tool.
	Source string `json:"source,omitempty"`
}

// ParallelIn reports whether calls of t in one batch may run at the same
// time in this context: outside a session (inSession false) when t is
// ParallelSafe; in a session never, since its calls share the session's
// sandbox and keep the session's order.
func (t *Tool) ParallelIn(inSession bool) bool { return t.ParallelSafe && !inSession }

// RetrySafe reports whether a call that may already have started may be
// run again after an infrastructure failure: the tool spends nothing
// beyond file_read, or the operator marked it Idempotent. A write, a
// process or an HTTP request is never silently performed twice.
func (t *Tool) RetrySafe() bool { return t.Idempotent || retrySafe(t.Effects) }

// Unavailable returns why t cannot be called now, nil when it can.
func (t *Tool) Unavailable() error {
	if t.Available == nil {
		return nil
	}
	return t.Available()
}

// HasEffect reports whether the tool declares e.
func (t *Tool) HasEffect(e Effect) bool {
	for _, x := range t.Effects {
		if x == e {
			return true
		}
	}
	return false
}

// Runnable reports whether the tool can run (Run or Command is set). A tool
// that is not runnable is a declaration only: its schemas can be exported but
// the job service refuses its calls.
func (t *Tool) Runnable() bool { return t.Run != nil || t.Command != nil }

// Summary is the first non-empty line of the description (the whole
// description stays available for exports that want it).
func (t *Tool) Summary() string {
	for _, line := range strings.Split(t.Description, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// Env is what an in-process tool may touch.
type Env struct {
	// Workspace is the host directory of the job's workspace; file tools
	// must open it with os.OpenRoot and never escape it. Empty when the job
	// has no workspace.
	Workspace string
	// ReadOnly is true when the job may read but not write the workspace.
	ReadOnly bool
	// HTTP configures http_request; nil means defaults.
	HTTP *HTTPOptions
}

// HTTPOptions caps http_request. Zero fields take defaults.
type HTTPOptions struct {
	MaxResponseBytes int64
	Timeout          time.Duration
	MaxRedirects     int
	// Guard judges every address http_request connects to (the URL's, a
	// redirect's, each DNS answer, the socket address before connect).
	// nil: public addresses only. The job service sets the tenant's
	// guard: its allow_private_cidrs and sandboxd's own addresses.
	Guard *netclass.Guard
	// Allow, when set, is asked before every request and redirect
	// (method, host without port, port); an error refuses it with that
	// message. The job service sets it from the tenant's egress allowlist.
	Allow func(method, host string, port int) error
}

// Limits are resource limits of a tool's calls; zero means unset.
type Limits struct {
	MemoryBytes int64         `json:"memory_bytes,omitempty"`
	PIDs        int64         `json:"pids,omitempty"`
	CPUMillis   int64         `json:"cpu_millis,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	OutputBytes int64         `json:"output_bytes,omitempty"`
}

// Command is a process a sandboxed tool asks the job service to run.
type Command struct {
	Args  []string `json:"args"`
	Stdin []byte   `json:"stdin,omitempty"`
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	// Timeout is the time limit the call asks for (python_repl's and
	// bash's timeout_seconds); 0: the job's. The job service reads it at
	// submit and treats it as the call's limits.timeout: up to the
	// operator's ceiling, else the submit is refused.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Decode, when set, turns the Result of the finished process
	// (FromProcess: stdout as content, the exit status as the outcome)
	// into the tool's: a script answering a JSON object on stdout, a
	// Python function's return value. It sees a process that ran, whatever
	// its exit status.
	Decode func(Result) Result `json:"-"`
}

// Result is the normalised outcome of a tool call.
type Result struct {
	OK bool `json:"ok"`
	// Content is the text the model reads.
	Content string `json:"content"`
	// Error explains a failure in words a model can act on.
	Error string `json:"error,omitempty"`
	// Artifacts are files or images for the program, never sent to the model.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	Usage     Usage      `json:"usage"`
	// Effects are the effects this call actually spent.
	Effects []Effect `json:"effects,omitempty"`
	// Process carries exit details for sandboxed tools.
	Process *ProcessInfo `json:"process,omitempty"`
	// Truncated is set when the output was cut by an output cap (the runner
	// puts the "[... output truncated ...]" marker in the text itself).
	Truncated bool `json:"truncated,omitempty"`
	// Value is the repr() of a session python_repl cell's trailing
	// expression ("" when there is none or it is None), for programs; the
	// model reads it in Content, printed as print() writes it.
	Value string `json:"value,omitempty"`
}

// Artifact is a file produced by a tool. A tool returns it with Data; the
// job service stores the data apart (GET URL serves it) and keeps only the
// reference (name, mime type, size, URL) in the job's result.
type Artifact struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	// URL is where the stored artifact is served (set by the job service).
	URL string `json:"url,omitempty"`
	// Data is base64 in JSON; empty once stored.
	Data []byte `json:"data,omitempty"`
}

// Usage is what a call consumed.
type Usage struct {
	WallMS       int64 `json:"wall_ms"`
	CPUMS        int64 `json:"cpu_ms,omitempty"`
	PeakMemory   int64 `json:"peak_memory_bytes,omitempty"`
	BytesIn      int64 `json:"bytes_in,omitempty"`
	BytesOut     int64 `json:"bytes_out,omitempty"`
	OutputTokens int64 `json:"-"`
}

// ProcessInfo reports how a sandboxed process ended.
type ProcessInfo struct {
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	OOMKilled bool   `json:"oom_killed,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	// ForkLoop: killed because it kept forking at its process limit.
	ForkLoop        bool   `json:"fork_loop,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	// MemoryLimit is the sandbox's memory limit in bytes when known (0 when
	// not); FromProcess quotes it in the out-of-memory message.
	MemoryLimit int64 `json:"memory_limit_bytes,omitempty"`
	// PIDsLimit is the sandbox's process limit when known; FromProcess
	// quotes it in the fork-loop message.
	PIDsLimit int64 `json:"pids_limit,omitempty"`
}

// Call is a tool call as a model produces it. Arguments may be a JSON object
// or a JSON string holding an object (OpenAI style); ID is created when
// missing.
type Call struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// CachePolicy says how long a tool's results may be reused.
type CachePolicy struct {
	// TTL bounds an entry's life; 0: until evicted (the cache is bounded)
	// or, for file_read tools, until the session's workspace changes.
	TTL time.Duration `json:"ttl,omitempty"`
	// HTTPReadOnly: the tool's http effect only reads (web_search asks a
	// search backend), so it may be cached despite http.
	HTTPReadOnly bool `json:"-"`
}
