package api

import (
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// The API's JSON shapes are package wire's (shared with api/client); the
// names below are the server's for them, and the functions render the job
// service's values in them (TestWireShapes keeps both sides' fields equal).
type (
	jobView       = wire.Job
	jobList       = wire.JobList
	limitsBody    = wire.Limits
	submitBody    = wire.SubmitRequest
	eventView     = wire.Event
	toolView      = wire.Tool
	sessionBody   = wire.SessionRequest
	sessionView   = wire.Session
	sessionList   = wire.SessionList
	guardView     = wire.Guard
	remainingView = wire.Remaining
	approvalView  = *wire.Approval
	approvalList  = wire.ApprovalList
	decisionBody  = wire.Decision
	batchView     = wire.Batch
	callView      = wire.CallRecord
	errorBody     = wire.ErrorBody
	errorPayload  = wire.ErrorPayload
)

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
		State: wire.JobState(j.State), Reason: j.Reason, Result: viewResult(j.Result), Attempts: j.Attempts,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Guard: viewGuard(j.Guard), Egress: viewEgress(j.Egress), Callback: viewCallback(j.Callback),
		Tags: tagsView(j.Tags), Metadata: metadataView(j.Metadata), Cached: j.Cached, Hooks: viewHooks(j.Hooks),
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

func limitsView(l runner.Limits) limitsBody {
	return limitsBody{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		TimeoutMS: l.Timeout.Milliseconds(), OutputBytes: l.OutputBytes,
		NoFile: l.NoFile, FileSizeBytes: l.FileSize,
		DiskBytes: l.DiskBytes, DiskInodes: l.DiskInodes,
	}
}

func viewEffects(es []tools.Effect) []wire.Effect {
	if es == nil {
		return nil
	}
	out := make([]wire.Effect, len(es))
	for i, e := range es {
		out[i] = string(e)
	}
	return out
}

func toEffects(es []wire.Effect) []tools.Effect {
	if es == nil {
		return nil
	}
	out := make([]tools.Effect, len(es))
	for i, e := range es {
		out[i] = tools.Effect(e)
	}
	return out
}

func viewResult(r *tools.Result) *wire.Result {
	if r == nil {
		return nil
	}
	v := &wire.Result{
		OK: r.OK, Content: r.Content, Error: r.Error, Artifacts: viewArtifacts(r.Artifacts),
		Usage: viewUsage(r.Usage), Effects: viewEffects(r.Effects), Truncated: r.Truncated,
		Value: r.Value,
	}
	if p := r.Process; p != nil {
		v.Process = &wire.Process{
			ExitCode: p.ExitCode, Signal: p.Signal, OOMKilled: p.OOMKilled, TimedOut: p.TimedOut, ForkLoop: p.ForkLoop,
			OutputTruncated: p.OutputTruncated, Stdout: p.Stdout, Stderr: p.Stderr, MemoryLimit: p.MemoryLimit, PIDsLimit: p.PIDsLimit,
		}
	}
	return v
}

func viewUsage(u tools.Usage) wire.Usage {
	return wire.Usage{WallMS: u.WallMS, CPUMS: u.CPUMS, PeakMemory: u.PeakMemory, BytesIn: u.BytesIn, BytesOut: u.BytesOut}
}

func viewArtifacts(as []tools.Artifact) []wire.Artifact {
	if as == nil {
		return nil
	}
	out := make([]wire.Artifact, len(as))
	for i, a := range as {
		out[i] = wire.Artifact{Name: a.Name, MimeType: a.MimeType, Size: a.Size, URL: a.URL, Data: a.Data}
	}
	return out
}

func viewProblems(ps []tools.Problem) []wire.Problem {
	if ps == nil {
		return nil
	}
	out := make([]wire.Problem, len(ps))
	for i, p := range ps {
		out[i] = wire.Problem{Field: p.Field, Message: p.Message}
	}
	return out
}

func viewEgress(es []job.EgressRecord) []wire.EgressRecord {
	if es == nil {
		return nil
	}
	out := make([]wire.EgressRecord, len(es))
	for i, e := range es {
		out[i] = wire.EgressRecord{Time: e.Time, Method: e.Method, Host: e.Host, Port: e.Port, IP: e.IP,
			Allowed: e.Allowed, Rule: e.Rule, Reason: e.Reason, BytesOut: e.BytesOut, BytesIn: e.BytesIn}
	}
	return out
}

func viewHooks(hs []job.HookRecord) []wire.HookRecord {
	if hs == nil {
		return nil
	}
	out := make([]wire.HookRecord, len(hs))
	for i, h := range hs {
		out[i] = wire.HookRecord{Phase: h.Phase, URL: h.URL, Outcome: h.Outcome, Reason: h.Reason, Error: h.Error,
			FailOpen: h.FailOpen, Status: h.Status, DurationMS: h.DurationMS, Time: h.Time}
	}
	return out
}

func viewCallback(c *job.Callback) *wire.Callback {
	if c == nil {
		return nil
	}
	v := &wire.Callback{URL: c.URL, State: c.State}
	for _, a := range c.Attempts {
		v.Attempts = append(v.Attempts, wire.CallbackAttempt{At: a.At, DurationMS: a.DurationMS, Status: a.Status, Error: a.Error})
	}
	return v
}

func viewFileInfo(fi job.FileInfo) wire.FileInfo {
	return wire.FileInfo{Name: fi.Name, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime}
}

func viewFileList(path string, list []job.FileInfo) wire.FileList {
	out := wire.FileList{Path: path, Entries: make([]wire.FileInfo, len(list))}
	for i, fi := range list {
		out.Entries[i] = viewFileInfo(fi)
	}
	return out
}

func viewTimeline(t *job.Timeline) *wire.Timeline {
	v := &wire.Timeline{JobID: t.JobID, State: wire.JobState(t.State), Entries: make([]wire.TimelineEntry, len(t.Entries)),
		QueuedMS: t.QueuedMS, RunMS: t.RunMS, TotalMS: t.TotalMS, Truncated: t.Truncated}
	for i, e := range t.Entries {
		v.Entries[i] = wire.TimelineEntry{Type: string(e.Type), Seq: e.Seq, Time: e.Time, DurationMS: e.DurationMS,
			Chunks: e.Chunks, StdoutBytes: e.StdoutBytes, StderrBytes: e.StderrBytes}
	}
	return v
}

func viewEvent(ev job.Event) eventView {
	return eventView{Seq: ev.Seq, Type: string(ev.Type), Time: ev.Time, Data: ev.Data, Job: viewJob(ev.Job)}
}

func viewTool(t *tools.Tool) toolView {
	v := toolView{
		Name: t.Name, Description: t.Description, InputSchema: t.InputSchema,
		OutputSchema: t.OutputSchema, Effects: viewEffects(t.Effects), ParallelSafe: t.ParallelSafe,
		Idempotent: t.Idempotent, ReturnDirect: t.ReturnDirect, Source: t.Source, Available: true,
	}
	if err := t.Unavailable(); err != nil {
		v.Available, v.Unavailable = false, err.Error()
	}
	if len(v.InputSchema) == 0 {
		v.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	if v.Effects == nil {
		v.Effects = []wire.Effect{}
	}
	return v
}

func viewSession(s *job.Session) *sessionView {
	eff := viewEffects(s.Effects)
	if eff == nil {
		eff = []wire.Effect{}
	}
	return &sessionView{
		ID: s.ID, Tenant: s.Tenant, Image: s.Image, Effects: eff, Limits: limitsView(s.Limits),
		State: wire.SessionState(s.State), Reason: s.Reason,
		TTLSeconds: int64(s.TTL / time.Second), IdleTimeoutSeconds: int64(s.IdleTimeout / time.Second),
		CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, LastUsedAt: s.LastUsedAt, ClosedAt: s.ClosedAt,
		Sandbox: s.Sandbox,
		Tags:    tagsView(s.Tags), Metadata: metadataView(s.Metadata),
	}
}

func viewApproval(a *job.Approval) approvalView {
	args := a.Arguments
	if args == nil {
		args = []byte("{}")
	}
	eff := viewEffects(a.Effects)
	if eff == nil {
		eff = []wire.Effect{}
	}
	return &wire.Approval{
		ID: a.ID, Tenant: a.Tenant, JobID: a.JobID, SessionID: a.SessionID, Tool: a.Tool, Arguments: args,
		Effects: eff, Rule: a.Rule, Reason: a.Reason, State: string(a.State),
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt, DecisionReason: a.DecisionReason,
	}
}

func viewGuard(g *job.GuardRecord) *guardView {
	if g == nil {
		return nil
	}
	v := &guardView{Outcome: string(g.Outcome), Code: g.Code, Rule: g.Rule, Reason: g.Reason,
		Refunded: g.Refunded, DecidedAt: g.DecidedAt, Remaining: make([]remainingView, 0, len(g.Remaining)),
		RetryAt: g.RetryAt, ApprovalID: g.ApprovalID}
	if g.RetryAt != nil {
		v.RetryAfterMS = max(1, g.RetryAt.Sub(g.DecidedAt).Milliseconds())
	}
	for _, r := range g.Remaining {
		rv := remainingView{Rule: r.Rule, Effect: string(r.Effect), Tool: r.Tool, Scope: r.Scope, Limit: r.Limit, Remaining: r.Remaining}
		if !r.ResetsAt.IsZero() {
			t := r.ResetsAt
			rv.ResetsAt = &t
		}
		v.Remaining = append(v.Remaining, rv)
	}
	return v
}

func viewCall(c job.CallRecord) callView {
	v := callView{
		CallID: c.CallID, GeneratedID: c.GeneratedID, Tool: c.Tool, ReturnDirect: c.ReturnDirect, Cached: c.Cached, JobID: c.JobID, State: c.State, Reason: c.Reason,
		OK: c.OK, Error: c.Error, Details: viewProblems(c.Details), Attempts: c.Attempts, Effects: viewEffects(c.Effects),
		Artifacts: viewArtifacts(c.Artifacts), Guard: viewGuard(c.Guard), StartedAt: c.StartedAt, FinishedAt: c.FinishedAt,
		Content: c.Answer, IsError: c.IsError,
	}
	if c.Usage != nil {
		u := viewUsage(*c.Usage)
		v.Usage = &u
	}
	return v
}
