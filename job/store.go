package job

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// FinishWriter is a Store that records a job together with events of it in
// one write: Update then AppendEvents, atomically (both or neither; no
// such job is ErrNotFound and writes nothing). The service records a
// job's terminal state with its last events so (eventSink.take): one
// commit per job where two would do the same.
type FinishWriter interface {
	UpdateWithEvents(ctx context.Context, j *Job, evs []EventRecord) error
}

// Store is the durable record of jobs the service consumes. Package store
// implements it (SQLite, Postgres); the service never imports a backend.
//
// Every method is safe for concurrent use. Jobs passed in and returned are
// owned by the caller: a Store copies what it keeps.
type Store interface {
	// Create records a new job. A second job of the same tenant with the
	// same non-empty IdempotencyKey, or a duplicate ID, is ErrConflict.
	Create(ctx context.Context, j *Job) error
	// Get returns a job by ID, of any tenant, or ErrNotFound.
	Get(ctx context.Context, id string) (*Job, error)
	// GetByIdempotencyKey returns the tenant's job with that key or
	// ErrNotFound.
	GetByIdempotencyKey(ctx context.Context, tenant, key string) (*Job, error)
	// Update replaces the mutable fields of the record with j's (all but
	// ID, Tenant, CreatedAt and Retry); ErrNotFound when there is no such
	// job.
	Update(ctx context.Context, j *Job) error
	// List returns a tenant's (AllTenants: every tenant's) jobs newest
	// first (CreatedAt, then ID), filtered by f.Tool, f.State, f.SessionID
	// and the CreatedAt bounds f.Since (inclusive) and f.Until (exclusive). Limit <= 0 means 50; at most 500.
	// next is the opaque cursor of the following page, "" on the last
	// page. A malformed cursor is ErrInvalid.
	List(ctx context.Context, tenant string, f ListFilter) (jobs []*Job, next string, err error)
	// ListUnfinished returns every queued, running or pending_approval
	// job, oldest first.
	ListUnfinished(ctx context.Context) ([]*Job, error)
	// ListPendingCallbacks returns every terminal job whose completion
	// callback is still pending (Callback.State), the earliest finished
	// first: deliveries a stopped process left to do.
	ListPendingCallbacks(ctx context.Context) ([]*Job, error)

	// CreateSession records a new session; a duplicate ID is ErrConflict.
	CreateSession(ctx context.Context, s *Session) error
	// GetSession returns a session by ID, of any tenant, or ErrNotFound.
	GetSession(ctx context.Context, id string) (*Session, error)
	// UpdateSession replaces the mutable fields (state, reason,
	// last_used_at, closed_at); ErrNotFound when there is no such session.
	UpdateSession(ctx context.Context, s *Session) error
	// ListSessions returns a tenant's (AllTenants: every tenant's)
	// sessions newest first, paginated like List.
	ListSessions(ctx context.Context, tenant string, f SessionFilter) (sessions []*Session, next string, err error)
	// ListOpenSessions returns every creating or active session.
	ListOpenSessions(ctx context.Context) ([]*Session, error)

	// CreateApproval records a new approval; a duplicate ID is ErrConflict.
	CreateApproval(ctx context.Context, a *Approval) error
	// GetApproval returns an approval by ID, of any tenant, or ErrNotFound.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// DecideApproval records a pending approval's outcome (state,
	// decided_at, decision_reason). ErrConflict when it is not pending
	// any more (decided or expired by someone else first).
	DecideApproval(ctx context.Context, a *Approval) error
	// ListApprovals returns a tenant's (AllTenants: every tenant's) approvals newest first, paginated
	// like List.
	ListApprovals(ctx context.Context, tenant string, f ApprovalFilter) ([]*Approval, string, error)
	// ListPendingApprovals returns every pending approval, oldest first.
	ListPendingApprovals(ctx context.Context) ([]*Approval, error)
	// ListSpends returns the guard's unrefunded spends of jobs created
	// at or after since (to restore budgets after a restart).
	ListSpends(ctx context.Context, since time.Time) ([]policy.Spend, error)

	// AppendEvents records events of one or more jobs in one write (the
	// service batches them: one call per flush, never one per output
	// chunk). Each job must exist (ErrNotFound otherwise, and nothing is
	// written). An event whose (JobID, Seq) is already recorded is kept as
	// it was, so retrying a batch is harmless.
	AppendEvents(ctx context.Context, evs []EventRecord) error
	// ListEvents returns the job's events with Seq > after, in Seq order,
	// at most limit of them (limit <= 0 means 256; at most 1000). A job
	// without events (or without a record) has none: no error.
	ListEvents(ctx context.Context, jobID string, after, limit int) ([]EventRecord, error)

	// PutArtifact stores an artifact of a job with its Data. The job must
	// exist (ErrNotFound); a second artifact of the same job and name is
	// ErrConflict.
	PutArtifact(ctx context.Context, jobID string, a tools.Artifact) error
	// GetArtifact returns a job's artifact with its Data, or ErrNotFound.
	GetArtifact(ctx context.Context, jobID, name string) (*tools.Artifact, error)

	// CreateBatch records a new batch of a turn (BatchRecord). A
	// duplicate ID, or a second batch of the same tenant with the same
	// non-empty IdempotencyKey, is ErrConflict.
	CreateBatch(ctx context.Context, b *BatchRecord) error
	// GetBatch returns a batch by ID, of any tenant, or ErrNotFound.
	GetBatch(ctx context.Context, id string) (*BatchRecord, error)
	// GetBatchByIdempotencyKey returns the tenant's batch with that key
	// or ErrNotFound.
	GetBatchByIdempotencyKey(ctx context.Context, tenant, key string) (*BatchRecord, error)
	// UpdateBatch replaces the mutable fields of the record with b's
	// (state, finished_at, calls, callback); ErrNotFound when there is no
	// such batch.
	UpdateBatch(ctx context.Context, b *BatchRecord) error
	// ListUnfinishedBatches returns every batch not completed, oldest
	// first: what a stopped process left to run.
	ListUnfinishedBatches(ctx context.Context) ([]*BatchRecord, error)

	// DeleteFinishedJobs deletes up to limit terminal jobs that finished
	// before `before`, the earliest finished first, together with their
	// events, artifacts and approvals, each batch in one short write. Jobs
	// with a guard record created at or after keepGuardedSince are kept:
	// their spends restore budgets at the next start (ListSpends).
	// In the same write it deletes up to limit completed batches
	// (BatchRecord) that finished before `before` and none of whose jobs
	// is left.
	DeleteFinishedJobs(ctx context.Context, before, keepGuardedSince time.Time, limit int) (Deleted, error)
	// Size reports how many bytes the store's records occupy.
	Size(ctx context.Context) (StoreSize, error)
	// Compact gives space freed by deletions back (SQLite: incremental
	// vacuum in small steps between other writes; a backend whose own
	// vacuum does it may do nothing) and returns the bytes given back.
	Compact(ctx context.Context) (int64, error)
}

// EventRecord is a job event as the store keeps it. Lifecycle events carry
// no job snapshot: a replay takes it from the job's record, so the store
// never holds a result twice.
type EventRecord struct {
	JobID string
	Seq   int
	Type  EventType
	Time  time.Time
	// Data is the output chunk of stdout/stderr events.
	Data string
}

// Deleted is what one DeleteFinishedJobs call removed.
type Deleted struct {
	Jobs int
	// Batches is how many turn batches went with their jobs.
	Batches int
	// Bytes is the data the deleted records held: arguments, results,
	// event output and artifact data.
	Bytes int64
}

// StoreSize is the space a store's records take.
type StoreSize struct {
	// Bytes is the space in use by records and indexes; retention
	// compares it with its max_bytes.
	Bytes int64
	// FileBytes is what the store occupies on disk (SQLite: the database
	// file, including free pages not yet compacted, and its WAL).
	FileBytes int64
}
