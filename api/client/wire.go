package client

import (
	"encoding/json"
	"net/url"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// The JSON shapes of the API (see api/openapi.yaml).

type wireSubmit struct {
	Tool           string            `json:"tool,omitempty"`
	Arguments      json.RawMessage   `json:"arguments,omitempty"`
	CallID         string            `json:"call_id,omitempty"`
	Call           json.RawMessage   `json:"call,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Limits         *wireLimits       `json:"limits,omitempty"`
	SessionID      string            `json:"session_id,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	// Guard: the decision, with the approval a pending job waits for and
	// when a refused call may be retried.
	Guard *job.GuardRecord `json:"guard,omitempty"`
}

type wireLimits struct {
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

func fromLimits(l runner.Limits) wireLimits {
	return wireLimits{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		TimeoutMS: l.Timeout.Milliseconds(), OutputBytes: l.OutputBytes,
		NoFile: l.NoFile, FileSizeBytes: l.FileSize,
		DiskBytes: l.DiskBytes, DiskInodes: l.DiskInodes,
	}
}

func (l wireLimits) limits() runner.Limits {
	return runner.Limits{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		Timeout:     time.Duration(l.TimeoutMS) * time.Millisecond,
		OutputBytes: l.OutputBytes, NoFile: l.NoFile, FileSize: l.FileSizeBytes,
		DiskBytes: l.DiskBytes, DiskInodes: l.DiskInodes,
	}
}

type wireJob struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	Tool           string            `json:"tool"`
	CallID         string            `json:"call_id"`
	Arguments      json.RawMessage   `json:"arguments"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Runner         string            `json:"runner,omitempty"`
	SessionID      string            `json:"session_id,omitempty"`
	Limits         wireLimits        `json:"limits"`
	State          job.State         `json:"state"`
	Reason         string            `json:"reason,omitempty"`
	Result         *tools.Result     `json:"result,omitempty"`
	Attempts       int               `json:"attempts"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
	FinishedAt     *time.Time        `json:"finished_at,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Cached         bool              `json:"cached,omitempty"`
	// Guard: the decision, with the approval a pending job waits for and
	// when a refused call may be retried.
	Guard *job.GuardRecord `json:"guard,omitempty"`
}

func (w *wireJob) job() *job.Job {
	return &job.Job{
		ID: w.ID, Tenant: w.Tenant, Tool: w.Tool, CallID: w.CallID, Args: w.Arguments,
		IdempotencyKey: w.IdempotencyKey, Runner: w.Runner, SessionID: w.SessionID, Limits: w.Limits.limits(),
		State: w.State, Reason: w.Reason, Result: w.Result, Attempts: w.Attempts,
		CreatedAt: w.CreatedAt, StartedAt: w.StartedAt, FinishedAt: w.FinishedAt,
		Tags: nonEmpty(w.Tags), Metadata: nonEmptyMap(w.Metadata), Cached: w.Cached, Guard: w.Guard,
	}
}

// nonEmpty and nonEmptyMap give nil for none, as the job service does.
func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nonEmptyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// labelQuery adds a list's label filters to q.
func labelQuery(q url.Values, f job.LabelFilter) {
	for _, t := range f.Tags {
		q.Add("tag", t)
	}
	for k, v := range f.Metadata {
		q.Set("metadata."+k, v)
	}
}

func toWire(j *job.Job) wireJob {
	return wireJob{
		ID: j.ID, Tenant: j.Tenant, Tool: j.Tool, CallID: j.CallID, Arguments: j.Args,
		IdempotencyKey: j.IdempotencyKey, Runner: j.Runner, SessionID: j.SessionID, Limits: fromLimits(j.Limits),
		State: j.State, Reason: j.Reason, Result: j.Result, Attempts: j.Attempts,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Tags: j.Tags, Metadata: j.Metadata, Cached: j.Cached, Guard: j.Guard,
	}
}

// MarshalJob renders a job in the API's JSON shape (limits in timeout_ms,
// arguments under "arguments"), indented, as `sandboxd run --output json`
// prints it.
func MarshalJob(j *job.Job) ([]byte, error) {
	return json.MarshalIndent(toWire(j), "", "  ")
}
