package job

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/policy"
)

// Store is the durable record of jobs the service consumes. Package store
// implements it (SQLite); the service never imports a backend.
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
	// ID, Tenant and CreatedAt); ErrNotFound when there is no such job.
	Update(ctx context.Context, j *Job) error
	// List returns a tenant's jobs newest first (CreatedAt, then ID),
	// filtered by f.Tool and f.State. Limit <= 0 means 50; at most 500.
	// next is the opaque cursor of the following page, "" on the last
	// page. A malformed cursor is ErrInvalid.
	List(ctx context.Context, tenant string, f ListFilter) (jobs []*Job, next string, err error)
	// ListUnfinished returns every queued, running or pending_approval
	// job, oldest first.
	ListUnfinished(ctx context.Context) ([]*Job, error)

	// CreateSession records a new session; a duplicate ID is ErrConflict.
	CreateSession(ctx context.Context, s *Session) error
	// GetSession returns a session by ID, of any tenant, or ErrNotFound.
	GetSession(ctx context.Context, id string) (*Session, error)
	// UpdateSession replaces the mutable fields (state, reason,
	// last_used_at, closed_at); ErrNotFound when there is no such session.
	UpdateSession(ctx context.Context, s *Session) error
	// ListSessions returns a tenant's sessions newest first, paginated
	// like List.
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
	// ListApprovals returns a tenant's approvals newest first, paginated
	// like List.
	ListApprovals(ctx context.Context, tenant string, f ApprovalFilter) ([]*Approval, string, error)
	// ListPendingApprovals returns every pending approval, oldest first.
	ListPendingApprovals(ctx context.Context) ([]*Approval, error)
	// ListSpends returns the guard's unrefunded spends of jobs created
	// at or after since (to restore budgets after a restart).
	ListSpends(ctx context.Context, since time.Time) ([]policy.Spend, error)
}
