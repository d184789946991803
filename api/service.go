package api

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// JobService is what the HTTP API needs from the job service. *job.Service
// implements it.
type JobService interface {
	// Submit records and enqueues a call. Errors: job.ErrQueueFull,
	// job.ErrInvalid (wrapped, message names the problem),
	// tools.ErrUnknownTool (wrapped), *tools.ValidationError,
	// job.ErrShutdown; with a session ID also job.ErrSessionNotFound,
	// job.ErrSessionClosed and job.ErrEffectNotAllowed. With an idempotency
	// key already used by the tenant it returns the existing job and
	// created=false.
	Submit(ctx context.Context, tenant string, req job.SubmitRequest) (j *job.Job, created bool, err error)
	// Get returns a tenant's job; another tenant's job is job.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (*job.Job, error)
	List(ctx context.Context, tenant string, f job.ListFilter) (jobs []*job.Job, next string, err error)
	// Cancel stops a queued or running job; cancelling a terminal job
	// returns it unchanged.
	Cancel(ctx context.Context, tenant, id string) (*job.Job, error)
	// Wait blocks until the job is terminal or ctx ends (then it returns
	// the current snapshot and ctx.Err()).
	Wait(ctx context.Context, tenant, id string) (*job.Job, error)
	// Subscribe replays the job's events so far and then streams new ones;
	// the channel closes after the finished event or when ctx ends.
	Subscribe(ctx context.Context, tenant, id string) (<-chan job.Event, error)
	Registry() *tools.Registry
	// QueueRetryAfter estimates when a full queue will have room (for the
	// Retry-After header).
	QueueRetryAfter() int
}

// ArtifactService is the optional part of the job service that serves a
// job's stored artifacts (GET /v1/jobs/{id}/artifacts/{name}). *job.Service
// implements it.
type ArtifactService interface {
	// Artifact returns the artifact with its data; another tenant's job,
	// or no artifact of that name, is job.ErrNotFound.
	Artifact(ctx context.Context, tenant, jobID, name string) (*tools.Artifact, error)
}

// SessionService is the optional part of the job service that serves
// /v1/sessions; New mounts those routes only when the JobService
// implements it. *job.Service does.
type SessionService interface {
	// CreateSession errors: job.ErrInvalid, job.ErrSessionLimit,
	// job.ErrUnsupported (the runner cannot honour the effects), job.ErrShutdown.
	CreateSession(ctx context.Context, tenant string, req job.SessionRequest) (*job.Session, error)
	// GetSession: another tenant's session is job.ErrSessionNotFound.
	GetSession(ctx context.Context, tenant, id string) (*job.Session, error)
	ListSessions(ctx context.Context, tenant string, f job.SessionFilter) ([]*job.Session, string, error)
	// CloseSession destroys the sandbox and the workspace; closing a closed
	// session returns it unchanged.
	CloseSession(ctx context.Context, tenant, id string) (*job.Session, error)
	// PutFile, OpenFile, PutArchive and GetArchive move files in and out
	// of an active session's workspace (job.ErrSessionClosed otherwise).
	PutFile(ctx context.Context, tenant, id, path string, r io.Reader) (job.FileInfo, error)
	OpenFile(ctx context.Context, tenant, id, path string) (io.ReadCloser, job.FileInfo, []job.FileInfo, error)
	PutArchive(ctx context.Context, tenant, id, dir string, r io.Reader) (int, error)
	GetArchive(ctx context.Context, tenant, id, dir string, w io.Writer) error
}
