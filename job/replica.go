package job

import (
	"context"
	"errors"
	"time"
)

// Replicas: with a shared store (Postgres) several sandboxd processes
// serve one database. Each holds a lease (Lease) it renews; submitted jobs
// are queued in the store and claimed by whichever replica has a free
// worker, in fair order across tenants (ClaimOrder); every write of a job
// or session is fenced by the writer's lease epoch; and a live replica
// takes over the bookkeeping of one whose lease expired (Takeover). The
// store implements Coordinator (store.Postgres); the service uses it when
// Config.Replica is set (replica.go, replica_run.go).

var (
	// ErrLeaseLost: the replica's lease expired or was taken over; it
	// must stop serving at once.
	ErrLeaseLost = errors.New("replica lease lost")
	// ErrFenced: a write of a job or session the writer does not own
	// under its current lease epoch (another replica owns it).
	ErrFenced = errors.New("write fenced: the job is owned by another lease")
)

// Lease is a replica's hold on its identity: Epoch grows each time the
// identity is (re)joined, so a write under an older epoch is refused.
type Lease struct {
	Replica string
	Epoch   int64
	// Address is the replica's internal address (host:port), where other
	// replicas forward requests for its sessions.
	Address string
	// Expires is when the lease ends unless renewed (database clock).
	Expires time.Time
}

// Takeover is what taking over a dead replica (or this replica's own
// previous epoch, at start) changed in the store.
type Takeover struct {
	Dead Lease
	// Lost are the jobs it was running, now failed/lost; Requeued its
	// claimed but not started jobs, free for any replica to claim.
	Lost, Requeued []*Job
	// Sessions are its open sessions, now closed with reason lost; its
	// sandboxes (labelled with its identity) are the caller's to reap.
	Sessions []*Session
	// Callbacks are its finished jobs whose completion callback was still
	// being delivered (retried with backoff in its memory), now owned by
	// nobody: the caller delivers them.
	Callbacks []*Job
	// Batches are its unfinished turn batches, now the taker's: the
	// taker resumes them (Turns.Recover), and only it can write them.
	Batches []*BatchRecord
}

// Rerun selects the running jobs of a dead replica that run again instead
// of ending failed/lost: Service.rerunsLost's rule, in the store's terms.
// A job is selected when it asked for retries (Job.Retry), is not a
// session's, its tool is one of Tools (the RetrySafe ones) and at most
// MaxStarted attempts of it started (Config.Turns.Retries).
type Rerun struct {
	Tools      []string
	MaxStarted int
}

// SelfClaim asks Coordinator.Enqueue to record a job already claimed by
// Lease, the submitting replica, which holds a free worker for it, when
// the fair order would give it that job at once anyway: no job waits
// unclaimed, and the job's tenant has fewer than Cap jobs claimed across
// replicas (its ClaimOrder cap; <= 0: none). Then the job costs no claim
// and wakes no other replica.
type SelfClaim struct {
	Lease Lease
	Cap   int
}

// ClaimOrder is the fair order of claims across tenants, the store-side
// form of the scheduler's (sched.go): a tenant's queued jobs are ranked
// by age, and the next claimed is the one with the least
// (running + rank) / weight across every replica, the oldest on a tie; a
// tenant with Cap (or DefaultCap) jobs running across replicas is skipped.
type ClaimOrder struct {
	Weights    map[string]int // tenant -> weight; absent: config.DefaultTenantWeight
	Caps       map[string]int // tenant -> max running across replicas; absent: DefaultCap
	DefaultCap int
}

// Claimed is a job a replica claimed and the seq of its last recorded
// event (its event numbering continues from there).
type Claimed struct {
	Job     *Job
	LastSeq int
}

// Coordinator is a shared store's replica coordination (store.Postgres).
// Every time it compares is the database's clock.
type Coordinator interface {
	// Join takes the lease of replica id for ttl under a new epoch (a
	// previous lease of the same id is superseded).
	Join(ctx context.Context, id, address string, ttl time.Duration) (Lease, error)
	// Renew extends l by ttl; ErrLeaseLost when it expired or a newer
	// epoch exists.
	Renew(ctx context.Context, l *Lease, ttl time.Duration) error
	// Replicas lists the live leases.
	Replicas(ctx context.Context) ([]Lease, error)
	// Enqueue records a new queued job, when fewer than capacity jobs are
	// queued in the whole store (otherwise ErrQueueFull and nothing is
	// written). With self, the job is recorded claimed by self.Lease when
	// SelfClaim's conditions hold (claimed is true); otherwise no replica
	// owns it and it is announced to every replica (NOTIFY).
	Enqueue(ctx context.Context, j *Job, capacity int, self *SelfClaim) (claimed bool, err error)
	// Claim takes up to n queued jobs no replica owns for l, in o's
	// order; concurrent claimers take disjoint jobs (SKIP LOCKED). A
	// session's jobs are not claimed: they run where its sandbox is.
	Claim(ctx context.Context, l Lease, n int, o ClaimOrder) ([]Claimed, error)
	// UpdateFenced is Store.Update for l: it applies while l is live and
	// the job is l's (or no replica's, and not being made running);
	// otherwise ErrFenced or ErrLeaseLost, and nothing changes.
	UpdateFenced(ctx context.Context, l Lease, j *Job) error
	// CreateSessionOwned is Store.CreateSession recording l as the
	// session's owner.
	CreateSessionOwned(ctx context.Context, l Lease, s *Session) error
	// UpdateSessionFenced is Store.UpdateSession fenced like UpdateFenced.
	UpdateSessionFenced(ctx context.Context, l Lease, s *Session) error
	// SessionOwner is the live lease holding session id's sandbox
	// (ErrNotFound when its owner's lease is not live).
	SessionOwner(ctx context.Context, id string) (Lease, error)
	// CreateOwned is Store.Create recording l as the job's owner (a
	// session's job, or one waiting for approval in l's memory), only
	// while l is live (else ErrLeaseLost).
	CreateOwned(ctx context.Context, l Lease, j *Job) error
	// JobOwner is the live lease holding job id: its owner, or its
	// session's for a session's job not started yet (ErrNotFound when
	// none is live: the job is queued for any replica, or finished).
	JobOwner(ctx context.Context, id string) (Lease, error)
	// SetJobOwner records l as the owner of job id, which no replica
	// owns (a job inserted with its guard spend); ErrFenced otherwise.
	SetJobOwner(ctx context.Context, l Lease, id string) error
	// CreateBatchOwned is Store.CreateBatch recording l as the batch's
	// owner, only while l is live (else ErrLeaseLost).
	CreateBatchOwned(ctx context.Context, l Lease, b *BatchRecord) error
	// UpdateBatchFenced is Store.UpdateBatch fenced like UpdateFenced: it
	// applies while l is live and the batch is l's (or no replica's).
	UpdateBatchFenced(ctx context.Context, l Lease, b *BatchRecord) error
	// TakeOver ends the bookkeeping of every replica whose lease expired
	// on behalf of by, and of by's own earlier epochs; their unfinished
	// batches become by's (Takeover.Batches), each for exactly one taker.
	// Their running jobs that rerun selects are queued again
	// (Takeover.Requeued) instead of ending lost.
	TakeOver(ctx context.Context, by Lease, rerun Rerun) ([]Takeover, error)
	// NotifyQueued wakes every replica's WaitQueued.
	NotifyQueued(ctx context.Context) error
	// WaitQueued sends on wake (never blocking) each time a job is
	// announced, until ctx ends; ready is closed once it listens.
	WaitQueued(ctx context.Context, wake chan<- struct{}, ready chan<- struct{}) error
}

// ReplicaConfig makes the service one replica of several sharing a
// Coordinator store.
type ReplicaConfig struct {
	// ID names the replica (stable across its restarts: a restart takes
	// over its previous epoch's records at once).
	ID string
	// Address is its internal address for other replicas.
	Address string
	// LeaseTTL is how long the lease lasts unrenewed (renewed every
	// LeaseTTL/3); default 15s.
	LeaseTTL time.Duration
	// OnLost is called once when the lease is lost (expired, superseded,
	// or not renewed for LeaseTTL): the process must stop serving.
	OnLost func(error)
}
