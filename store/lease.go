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
// The job service uses them when it runs as one replica of several
// (job.Config.Replica, job/replica_run.go).

var (
	// ErrLeaseLost is job.ErrLeaseLost.
	ErrLeaseLost = job.ErrLeaseLost
	// ErrFenced is job.ErrFenced.
	ErrFenced = job.ErrFenced
)

var (
	_ job.Coordinator   = (*Postgres)(nil)
	_ job.AtomicSpender = (*Postgres)(nil)
)

// Lease is a replica's lease (job.Lease).
type Lease = job.Lease

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

// Takeover is what one TakeOver changed of a dead replica's records
// (job.Takeover).
type Takeover = job.Takeover

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
