package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/job"
)

// The replica coordination primitives on Postgres: leases with epochs,
// claims of queued jobs with FOR UPDATE SKIP LOCKED, writes fenced by the
// writer's lease epoch, and the takeover of an expired replica's
// bookkeeping. Every time is the database's clock (clock_timestamp()), so
// replicas' clocks may disagree.
//
// Status: the primitives and their tests against a real Postgres; the job
// service does not use them yet (it runs one process per database, under
// HoldOwner).

var (
	// ErrLeaseLost: the replica's lease expired or was taken over; it
	// must stop serving at once.
	ErrLeaseLost = errors.New("replica lease lost")
	// ErrFenced: a write of a job the writer does not own under its
	// current lease epoch (another replica took it over).
	ErrFenced = errors.New("write fenced: the job is owned by another lease")
)

// Lease is a replica's hold on its identity: Epoch grows each time the
// identity is (re)joined, so a write under an older epoch is refused.
type Lease struct {
	Replica string
	Epoch   int64
	Address string
	// Expires is when the lease ends unless renewed (database clock).
	Expires time.Time
}

const dbNow = `(EXTRACT(EPOCH FROM clock_timestamp()) * 1e9)::BIGINT`

// Join takes the lease of replica id (a new epoch; a previous lease of the
// same id, a restarted process, is superseded) for ttl. address is the
// replica's internal address, where other replicas forward its sessions'
// requests.
func (s *Postgres) Join(ctx context.Context, id, address string, ttl time.Duration) (Lease, error) {
	l := Lease{Replica: id, Address: address}
	var exp int64
	err := s.pool.QueryRow(ctx, `INSERT INTO replicas (id, epoch, address, lease_expires_at, joined_at)
		VALUES ($1, 1, $2, `+dbNow+` + $3, `+dbNow+`)
		ON CONFLICT (id) DO UPDATE SET epoch = replicas.epoch + 1, address = EXCLUDED.address,
			lease_expires_at = EXCLUDED.lease_expires_at, joined_at = EXCLUDED.joined_at
		RETURNING epoch, lease_expires_at`, id, address, int64(ttl)).Scan(&l.Epoch, &exp)
	if err != nil {
		return Lease{}, pgErr("join replica "+id, err)
	}
	l.Expires = time.Unix(0, exp).UTC()
	return l, nil
}

// Renew extends l by ttl; ErrLeaseLost when it expired or a newer epoch
// exists (the caller stops serving).
func (s *Postgres) Renew(ctx context.Context, l *Lease, ttl time.Duration) error {
	var exp int64
	err := s.pool.QueryRow(ctx, `UPDATE replicas SET lease_expires_at = `+dbNow+` + $3
		WHERE id = $1 AND epoch = $2 AND lease_expires_at > `+dbNow+`
		RETURNING lease_expires_at`, l.Replica, l.Epoch, int64(ttl)).Scan(&exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("renew lease of %s epoch %d: %w", l.Replica, l.Epoch, ErrLeaseLost)
	}
	if err != nil {
		return pgErr("renew lease of "+l.Replica, err)
	}
	l.Expires = time.Unix(0, exp).UTC()
	return nil
}

// Replicas returns every replica with a live lease.
func (s *Postgres) Replicas(ctx context.Context) ([]Lease, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, epoch, address, lease_expires_at FROM replicas
		WHERE lease_expires_at > `+dbNow+` ORDER BY id`)
	out, err := collect(rows, err, func(sc scanner) (Lease, error) {
		var l Lease
		var exp int64
		err := sc.Scan(&l.Replica, &l.Epoch, &l.Address, &exp)
		l.Expires = time.Unix(0, exp).UTC()
		return l, err
	})
	return out, pgErr("list replicas", err)
}

// validLease is the SQL condition that lease ($1 replica, $2 epoch) is
// live, at the statement's time.
const validLease = `EXISTS (SELECT 1 FROM replicas r WHERE r.id = $1 AND r.epoch = $2 AND r.lease_expires_at > ` + dbNow + `)`

// Claim takes up to n queued jobs no replica owns, oldest first, for l:
// FOR UPDATE SKIP LOCKED, so concurrent claimers take disjoint jobs and
// each job is claimed once. A lost lease claims nothing (ErrLeaseLost).
func (s *Postgres) Claim(ctx context.Context, l Lease, n int) ([]*job.Job, error) {
	var jobs []*job.Job
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT `+validLease, l.Replica, l.Epoch).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrLeaseLost
		}
		rows, err := tx.Query(ctx, `UPDATE jobs SET owner = $1, owner_epoch = $2
			WHERE id IN (SELECT id FROM jobs WHERE state = 'queued' AND owner = ''
				ORDER BY created_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
			RETURNING `+jobColumns, l.Replica, l.Epoch, n)
		jobs, err = collect(rows, err, scanJob)
		return err
	})
	if errors.Is(err, ErrLeaseLost) {
		return nil, fmt.Errorf("claim jobs for %s epoch %d: %w", l.Replica, l.Epoch, ErrLeaseLost)
	}
	if err != nil {
		return nil, pgErr("claim jobs", err)
	}
	return jobs, nil
}

// UpdateFenced is Update for the owner of a claimed job: it applies only
// while l is live and the job is owned by l's replica under l's epoch;
// otherwise ErrFenced (or ErrLeaseLost), and nothing changes.
func (s *Postgres) UpdateFenced(ctx context.Context, l Lease, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET
		state = $3, reason = $4, result = $5, attempts = $6, started_at = $7, finished_at = $8,
		guard = $9, egress = $10, callback = $11
		WHERE id = $12 AND owner = $1 AND owner_epoch = $2 AND `+validLease,
		l.Replica, l.Epoch, r.state, r.reason, r.result, r.attempts, r.startedAt, r.finishedAt,
		r.guard, r.egress, r.callback, r.id)
	if err != nil {
		return pgErr("update job "+j.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.Get(ctx, j.ID); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	return fmt.Errorf("update job %s by %s epoch %d: %w", j.ID, l.Replica, l.Epoch, ErrFenced)
}

// Takeover is what one TakeOver call changed of a dead replica's records.
type Takeover struct {
	Dead Lease
	// Lost are the jobs it was running, now failed/lost; Requeued its
	// claimed but not started jobs, free for any replica to claim.
	Lost, Requeued []*job.Job
	// Sessions are its open sessions, now closed with reason lost; its
	// sandboxes (labelled with its identity) are the caller's to reap.
	Sessions []*job.Session
}

// TakeOver ends the bookkeeping of every replica whose lease expired, on
// behalf of the live lease by, each dead replica in one transaction: its
// running jobs fail as lost, its queued ones are released for claiming,
// its open sessions close as lost, and its row is deleted, so a late
// renewal or fenced write of it fails. Two replicas taking over at once
// take disjoint dead replicas (SKIP LOCKED).
func (s *Postgres) TakeOver(ctx context.Context, by Lease) ([]Takeover, error) {
	var out []Takeover
	for {
		var t Takeover
		done := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT `+validLease, by.Replica, by.Epoch).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return ErrLeaseLost
			}
			var exp int64
			err := tx.QueryRow(ctx, `SELECT id, epoch, address, lease_expires_at FROM replicas
				WHERE lease_expires_at <= `+dbNow+` ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED`).
				Scan(&t.Dead.Replica, &t.Dead.Epoch, &t.Dead.Address, &exp)
			if errors.Is(err, pgx.ErrNoRows) {
				done = true
				return nil
			}
			if err != nil {
				return err
			}
			t.Dead.Expires = time.Unix(0, exp).UTC()
			rows, err := tx.Query(ctx, `UPDATE jobs SET state = 'failed', reason = $2, finished_at = `+dbNow+`,
					result = $3, owner = '', owner_epoch = 0
				WHERE owner = $1 AND state = 'running' RETURNING `+jobColumns,
				t.Dead.Replica, string(job.ReasonLost), `{"ok":false,"content":"","error":"the replica running the job stopped renewing its lease"}`)
			if t.Lost, err = collect(rows, err, scanJob); err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `UPDATE jobs SET owner = '', owner_epoch = 0
				WHERE owner = $1 AND state = 'queued' RETURNING `+jobColumns, t.Dead.Replica)
			if t.Requeued, err = collect(rows, err, scanJob); err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `UPDATE sessions SET state = 'closed', reason = 'lost', closed_at = `+dbNow+`
				WHERE owner = $1 AND state IN ('creating', 'active') RETURNING `+sessionColumns, t.Dead.Replica)
			if t.Sessions, err = collect(rows, err, scanSession); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM replicas WHERE id = $1 AND epoch = $2`, t.Dead.Replica, t.Dead.Epoch)
			return err
		})
		if errors.Is(err, ErrLeaseLost) {
			return out, fmt.Errorf("take over for %s epoch %d: %w", by.Replica, by.Epoch, ErrLeaseLost)
		}
		if err != nil {
			return out, pgErr("take over expired replicas", err)
		}
		if done {
			return out, nil
		}
		out = append(out, t)
	}
}

// SetSessionOwner records that l's replica holds session id's sandbox.
func (s *Postgres) SetSessionOwner(ctx context.Context, l Lease, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sessions SET owner = $1, owner_epoch = $2 WHERE id = $3 AND `+validLease,
		l.Replica, l.Epoch, id)
	if err != nil {
		return pgErr("own session "+id, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.GetSession(ctx, id); err != nil {
			return fmt.Errorf("own session %s: %w", id, err)
		}
		return fmt.Errorf("own session %s: %w", id, ErrLeaseLost)
	}
	return nil
}

// jobsChannel is the LISTEN/NOTIFY channel a new queued job is announced
// on, so idle replicas claim it without polling.
const jobsChannel = "sandboxd_jobs"

// NotifyQueued wakes the replicas waiting in WaitQueued.
func (s *Postgres) NotifyQueued(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, jobsChannel)
	return pgErr("notify queued", err)
}

// WaitQueued listens on its own connection and sends on wake (without
// blocking: one pending wake is enough) each time a job is announced,
// until ctx ends. Ready is closed once the LISTEN is in place.
func (s *Postgres) WaitQueued(ctx context.Context, wake chan<- struct{}, ready chan<- struct{}) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return pgErr("listen", err)
	}
	defer func() {
		// The connection is LISTENing: close it rather than return it.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+jobsChannel); err != nil {
		return pgErr("listen", err)
	}
	close(ready)
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return pgErr("wait for notification", err)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}
