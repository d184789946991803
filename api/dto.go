package api

import (
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// jobView is a job as the API shows it: limits in the request's units
// (timeout_ms), arguments under the request's name.
type jobView struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	Tool           string          `json:"tool"`
	CallID         string          `json:"call_id"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Runner         string          `json:"runner,omitempty"`
	SessionID      string          `json:"session_id,omitempty"`
	Limits         limitsBody      `json:"limits"`
	State          job.State       `json:"state"`
	Reason         string          `json:"reason,omitempty"`
	Result         *tools.Result   `json:"result,omitempty"`
	Attempts       int             `json:"attempts"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// Guard is the guard's decision; absent when the tenant has no policy.
	Guard *guardView `json:"guard,omitempty"`
	// Egress audits the sandbox's outbound connections (http effect).
	Egress []job.EgressRecord `json:"egress,omitempty"`
	// Callback is the completion webhook and its delivery attempts.
	Callback *job.Callback `json:"callback,omitempty"`
	// Tags and Metadata are the client's labels.
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
	// Cached: answered from the result cache (nothing ran, no budget).
	Cached bool `json:"cached,omitempty"`
	// Hooks are the tool hooks' requests and outcomes.
	Hooks []job.HookRecord `json:"hooks,omitempty"`
}

func viewJob(j *job.Job) *jobView {
	if j == nil {
		return nil
	}
	args := j.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return &jobView{
		ID: j.ID, Tenant: j.Tenant, Tool: j.Tool, CallID: j.CallID, Arguments: args,
		IdempotencyKey: j.IdempotencyKey, Runner: j.Runner, SessionID: j.SessionID, Limits: limitsView(j.Limits),
		State: j.State, Reason: j.Reason, Result: j.Result, Attempts: j.Attempts,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Guard: viewGuard(j.Guard), Egress: j.Egress, Callback: j.Callback,
		Tags: tagsView(j.Tags), Metadata: metadataView(j.Metadata), Cached: j.Cached,
		Hooks: j.Hooks,
	}
}

// tagsView and metadataView show no labels as [] and {}.
func tagsView(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

func metadataView(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// CallbackBody is the body of a job's completion callback: the job as GET
// /v1/jobs/{id} shows it (job.Config.CallbackBody).
func CallbackBody(j *job.Job) ([]byte, error) {
	return json.Marshal(struct {
		Type string   `json:"type"`
		Job  *jobView `json:"job"`
	}{"job.finished", viewJob(j)})
}

type jobList struct {
	Jobs       []*jobView `json:"jobs"`
	NextCursor string     `json:"next_cursor"`
}

type eventView struct {
	Seq  int           `json:"seq"`
	Type job.EventType `json:"type"`
	Time time.Time     `json:"time"`
	Data string        `json:"data,omitempty"`
	Job  *jobView      `json:"job,omitempty"`
}

// toolView is sandboxd's own tool shape (GET /v1/tools without ?format).
type toolView struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Effects      []tools.Effect  `json:"effects"`
	ParallelSafe bool            `json:"parallel_safe"`
	Idempotent   bool            `json:"idempotent,omitempty"`
	ReturnDirect bool            `json:"return_direct"`
	Source       string          `json:"source,omitempty"`
	// Available is false while the tool cannot be called (its provider is
	// restarting); Unavailable says why.
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
}

func viewTool(t *tools.Tool) toolView {
	v := toolView{
		Name: t.Name, Description: t.Description, InputSchema: t.InputSchema,
		OutputSchema: t.OutputSchema, Effects: t.Effects, ParallelSafe: t.ParallelSafe,
		Idempotent: t.Idempotent, ReturnDirect: t.ReturnDirect, Source: t.Source, Available: true,
	}
	if err := t.Unavailable(); err != nil {
		v.Available, v.Unavailable = false, err.Error()
	}
	if len(v.InputSchema) == 0 {
		v.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	if v.Effects == nil {
		v.Effects = []tools.Effect{}
	}
	return v
}
