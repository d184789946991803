package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

// extraScan scans a row of a scan function's columns followed by extra
// ones.
type extraScan struct {
	sc    scanner
	extra []any
}

func (e extraScan) Scan(dest ...any) error { return e.sc.Scan(append(dest, e.extra...)...) }

// Claim takes up to n queued jobs no replica owns for l, in o's fair
// order (job.ClaimOrder), in one statement: FOR UPDATE SKIP LOCKED, so
// concurrent claimers take disjoint jobs and each job is claimed once. A
// lost lease claims nothing (ErrLeaseLost).
func (s *Postgres) Claim(ctx context.Context, l Lease, n int, o job.ClaimOrder) ([]job.Claimed, error) {
	var tenants []string
	var weights, caps []int32
	seen := map[string]bool{}
	for t := range o.Weights {
		seen[t] = true
	}
	for t := range o.Caps {
		seen[t] = true
	}
	defCap := o.DefaultCap
	if defCap <= 0 {
		defCap = math.MaxInt32
	}
	for t := range seen {
		w, c := o.Weights[t], o.Caps[t]
		if w <= 0 {
			w = config.DefaultTenantWeight
		}
		if c <= 0 {
			c = defCap
		}
		tenants, weights, caps = append(tenants, t), append(weights, int32(w)), append(caps, int32(c))
	}
	// A tenant's k-th queued job (by age) ranks (claimed + k) / weight,
	// claimed counting its jobs any replica holds; it is claimable while
	// claimed + k <= cap.
	rows, err := s.pool.Query(ctx, `UPDATE jobs SET owner = $1, owner_epoch = $2
		WHERE id IN (
			SELECT j.id FROM jobs j JOIN (
				SELECT c.id, c.created_at,
					(COALESCE(r.n, 0) + c.rk)::float8 / COALESCE(w.weight, $4::int) AS prio,
					COALESCE(w.cap, $5::int) - COALESCE(r.n, 0) - c.rk AS room
				FROM (SELECT id, tenant, created_at,
						row_number() OVER (PARTITION BY tenant ORDER BY created_at, id) AS rk
					FROM jobs WHERE state = 'queued' AND owner = '' AND session_id = '') c
				LEFT JOIN (SELECT tenant, count(*) AS n FROM jobs WHERE owner != ''
					AND state IN ('queued', 'running') GROUP BY tenant) r ON r.tenant = c.tenant
				LEFT JOIN unnest($6::text[], $7::int[], $8::int[]) AS w(tenant, weight, cap) ON w.tenant = c.tenant
			) o ON o.id = j.id
			WHERE j.state = 'queued' AND j.owner = '' AND j.session_id = '' AND o.room >= 0 AND `+validLease+`
			ORDER BY o.prio, o.created_at, j.id LIMIT $3
			FOR UPDATE OF j SKIP LOCKED)
		RETURNING `+jobColumns+`, (SELECT COALESCE(MAX(e.seq), 0) FROM job_events e WHERE e.job_id = jobs.id)`,
		l.Replica, l.Epoch, n, config.DefaultTenantWeight, defCap, tenants, weights, caps)
	out, err := collect(rows, err, func(sc scanner) (job.Claimed, error) {
		var c job.Claimed
		var seq int64
		j, err := scanJob(extraScan{sc, []any{&seq}})
		c.Job, c.LastSeq = j, int(seq)
		return c, err
	})
	if err != nil {
		return nil, pgErr("claim jobs", err)
	}
	if len(out) == 0 {
		if err := s.checkLease(ctx, l); err != nil {
			return nil, fmt.Errorf("claim jobs: %w", err)
		}
	}
	return out, nil
}

// checkLease is nil while l is live, else ErrLeaseLost.
func (s *Postgres) checkLease(ctx context.Context, l Lease) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT `+validLease, l.Replica, l.Epoch).Scan(&ok); err != nil {
		return pgErr("check lease", err)
	}
	if !ok {
		return fmt.Errorf("lease of %s epoch %d: %w", l.Replica, l.Epoch, ErrLeaseLost)
	}
	return nil
}

// Enqueue implements job.Coordinator: one statement inserts the job when
// the store holds fewer than capacity queued jobs, claimed by self's
// replica when the fair order lets it take the job at once (no job waits
// unclaimed, the tenant's cap has room), and otherwise notifies the
// replicas.
func (s *Postgres) Enqueue(ctx context.Context, j *job.Job, capacity int, self *job.SelfClaim) (bool, error) {
	r, err := toRow(j)
	if err != nil {
		return false, fmt.Errorf("enqueue job %s: %w", j.ID, err)
	}
	mine, owner, notify := selfClaimSQL(26, 2)
	replica, epoch, limit := selfClaimArgs(self)
	var claimed, notified bool
	n := 0
	rows, err := s.pool.Query(ctx, `WITH `+mine+`,
		ins AS (INSERT INTO jobs (`+jobColumns+`, owner, owner_epoch)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text,
			$9::text, $10::text, $11::text, $12::integer, $13::bigint, $14::bigint, $15::bigint, $16::text,
			$17::text, $18::text, $19::text, $20::text, $21::text, $22::boolean, $23::text, $25::boolean, `+owner+`
		FROM mine WHERE (SELECT count(*) FROM jobs WHERE state = 'queued') < $24
		RETURNING owner)
		SELECT `+notify+` FROM ins`,
		r.id, r.tenant, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.createdAt, r.startedAt, r.finishedAt, r.sessionID,
		r.guard, r.egress, r.callback, r.tags, r.metadata, r.cached, r.hooks, capacity, r.retry,
		replica, epoch, limit)
	if err == nil {
		for rows.Next() {
			if err = rows.Scan(&claimed, &notified); err != nil {
				break
			}
			n++
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if pgUnique(err) {
		return false, fmt.Errorf("enqueue job %s: %w: id or idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return false, pgErr("enqueue job "+j.ID, err)
	}
	if n == 0 {
		return false, fmt.Errorf("enqueue job %s: %w (%d queued across replicas)", j.ID, job.ErrQueueFull, capacity)
	}
	return claimed, nil
}

// selfClaimSQL is the claim at insert of job.SelfClaim, for Enqueue and
// CreateSpending: the CTE mine, whose ok says the job is recorded claimed
// by replica $lease at epoch $lease+1 (a live lease, no job waiting
// unclaimed, the tenant $tenant under its cap $lease+2); owner, the values
// of the owner and owner_epoch columns inserted FROM mine; and notify,
// the columns claimed and announced (NOTIFY when no replica owns the
// job) over the insert's RETURNING owner.
func selfClaimSQL(lease, tenant int) (mine, owner, notify string) {
	mine = fmt.Sprintf(`mine AS (SELECT $%[1]d::text != ''
			AND EXISTS (SELECT 1 FROM replicas r WHERE r.id = $%[1]d AND r.epoch = $%[2]d AND r.lease_expires_at > `+dbNow+`)
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued' AND owner = '' AND session_id = '')
			AND (SELECT count(*) FROM jobs WHERE tenant = $%[4]d AND owner != '' AND state IN ('queued', 'running')) < $%[3]d AS ok)`,
		lease, lease+1, lease+2, tenant)
	owner = fmt.Sprintf(`CASE WHEN mine.ok THEN $%[1]d::text ELSE '' END, CASE WHEN mine.ok THEN $%[2]d::bigint ELSE 0 END`, lease, lease+1)
	notify = `owner != '', (CASE WHEN owner = '' THEN pg_notify('` + jobsChannel + `', '') END) IS NOT NULL`
	return mine, owner, notify
}

// selfClaimArgs are selfClaimSQL's three arguments for self (nil: no
// claim at insert).
func selfClaimArgs(self *job.SelfClaim) (replica string, epoch int64, limit int32) {
	limit = math.MaxInt32
	if self == nil {
		return "", 0, limit
	}
	if self.Cap > 0 {
		limit = int32(min(self.Cap, math.MaxInt32))
	}
	return self.Lease.Replica, self.Lease.Epoch, limit
}

// takesOwner is the condition (over the row before an UpdateFenced, $9
// the new state) under which the writer becomes the job's owner: a
// session's job made running, or a pending job queued by its approval on
// the replica that holds it (it runs there; TakeOver frees it if that
// replica dies).
const takesOwner = `owner = '' AND (session_id != '' OR (state = 'pending_approval' AND $9::text = 'queued'))`

// UpdateFenced implements job.Coordinator: the write applies only while
// l is live and the job is owned by l's replica under l's epoch, or by no
// replica and not being made running (a cancel of a queued job, an
// approval's outcome). A session's job is never claimed (it runs on the
// replica holding the session's sandbox): the write making it running
// makes l its owner, as the write queuing an approved job does
// (takesOwner). Otherwise ErrFenced (or ErrLeaseLost), and nothing
// changes.
func (s *Postgres) UpdateFenced(ctx context.Context, l Lease, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET
		tool = $3, call_id = $4, args = $5, idempotency_key = $6, runner = $7, limits = $8,
		state = $9, reason = $10, result = $11, attempts = $12, started_at = $13, finished_at = $14,
		guard = $15, egress = $16, callback = $17, tags = $18, metadata = $19, cached = $20, hooks = $21,
		owner = CASE WHEN `+takesOwner+` THEN $1 ELSE owner END,
		owner_epoch = CASE WHEN `+takesOwner+` THEN $2 ELSE owner_epoch END
		WHERE id = $22 AND ((owner = $1 AND owner_epoch = $2) OR (owner = '' AND ($9::text != 'running' OR session_id != ''))) AND `+validLease,
		l.Replica, l.Epoch, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.startedAt, r.finishedAt, r.guard, r.egress, r.callback,
		r.tags, r.metadata, r.cached, r.hooks, r.id)
	if pgUnique(err) {
		return fmt.Errorf("update job %s: %w: idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return pgErr("update job "+j.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.Get(ctx, j.ID); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if err := s.checkLease(ctx, l); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	return fmt.Errorf("update job %s by %s epoch %d: %w", j.ID, l.Replica, l.Epoch, ErrFenced)
}

// CreateSessionOwned implements job.Coordinator.
func (s *Postgres) CreateSessionOwned(ctx context.Context, l Lease, ss *job.Session) error {
	if err := s.CreateSession(ctx, ss); err != nil {
		return err
	}
	return s.SetSessionOwner(ctx, l, ss.ID)
}

// UpdateSessionFenced implements job.Coordinator.
func (s *Postgres) UpdateSessionFenced(ctx context.Context, l Lease, ss *job.Session) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sessions SET state = $3, reason = $4, last_used_at = $5, closed_at = $6
		WHERE id = $7 AND ((owner = $1 AND owner_epoch = $2) OR owner = '') AND `+validLease,
		l.Replica, l.Epoch, string(ss.State), ss.Reason, ss.LastUsedAt.UnixNano(), nullTime(ss.ClosedAt), ss.ID)
	if err != nil {
		return pgErr("update session "+ss.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.GetSession(ctx, ss.ID); err != nil {
		return fmt.Errorf("update session %s: %w", ss.ID, err)
	}
	if err := s.checkLease(ctx, l); err != nil {
		return fmt.Errorf("update session %s: %w", ss.ID, err)
	}
	return fmt.Errorf("update session %s by %s epoch %d: %w", ss.ID, l.Replica, l.Epoch, ErrFenced)
}

// SessionOwner implements job.Coordinator.
func (s *Postgres) SessionOwner(ctx context.Context, id string) (Lease, error) {
	var l Lease
	var exp int64
	err := s.pool.QueryRow(ctx, `SELECT r.id, r.epoch, r.address, r.lease_expires_at
		FROM sessions ss JOIN replicas r ON r.id = ss.owner AND r.epoch = ss.owner_epoch
		WHERE ss.id = $1 AND r.lease_expires_at > `+dbNow, id).Scan(&l.Replica, &l.Epoch, &l.Address, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("owner of session %s: %w", id, job.ErrSessionNotFound)
	}
	if err != nil {
		return Lease{}, pgErr("owner of session "+id, err)
	}
	l.Expires = time.Unix(0, exp).UTC()
	return l, nil
}

// TakeOver ends the bookkeeping of every replica whose lease expired, on
// behalf of the live lease by, each dead replica in one transaction: its
// running jobs fail as lost, its queued ones are released for claiming,
// its open sessions close as lost, its undelivered callbacks pass to by,
// and its row is deleted, so a late
// renewal or fenced write of it fails. Two replicas taking over at once
// take disjoint dead replicas (SKIP LOCKED). The records by's replica
// holds under an earlier epoch (the process before a restart) are taken
// over first, as a Takeover whose Dead is by's replica at epoch by-1.
func (s *Postgres) TakeOver(ctx context.Context, by Lease, rerun job.Rerun) ([]Takeover, error) {
	var out []Takeover
	own := true
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
			if own {
				t.Dead = Lease{Replica: by.Replica, Epoch: by.Epoch - 1, Address: by.Address}
				if err := takeOverRows(ctx, tx, &t, rerun, `owner = $1 AND owner_epoch < $2`, by.Replica, by.Epoch); err != nil {
					return err
				}
				return takeOverBatches(ctx, tx, &t, by, `owner = $1 AND owner_epoch < $2`, by.Replica, by.Epoch)
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
			if err := takeOverRows(ctx, tx, &t, rerun, `owner = $1`, t.Dead.Replica); err != nil {
				return err
			}
			if err := takeOverBatches(ctx, tx, &t, by, `owner = $1`, t.Dead.Replica); err != nil {
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
		if !own || len(t.Lost)+len(t.Requeued)+len(t.Sessions)+len(t.Callbacks)+len(t.Batches) > 0 {
			out = append(out, t)
		}
		own = false
	}
}

// takeOverRows ends the jobs and sessions matching owned (a condition on
// owner and owner_epoch over args) into t. The running jobs rerun selects
// are queued again first (t.Requeued, with the claimed ones released).
func takeOverRows(ctx context.Context, tx pgx.Tx, t *Takeover, rerun job.Rerun, owned string, args ...any) error {
	n := len(args)
	var again []*job.Job
	if len(rerun.Tools) > 0 {
		rows, err := tx.Query(ctx, fmt.Sprintf(`UPDATE jobs SET state = 'queued', started_at = NULL, owner = '', owner_epoch = 0
			WHERE `+owned+` AND state = 'running' AND retry AND session_id = '' AND tool = ANY($%d) AND attempts <= $%d
			RETURNING `+jobColumns, n+1, n+2), append(args, rerun.Tools, rerun.MaxStarted)...)
		if again, err = collect(rows, err, scanJob); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`UPDATE jobs SET state = 'failed', reason = $%d, finished_at = `+dbNow+`,
			result = $%d, owner = '', owner_epoch = 0
		WHERE `+owned+` AND (state IN ('running', 'pending_approval') OR (state = 'queued' AND session_id != '')) RETURNING `+jobColumns, n+1, n+2),
		append(args, string(job.ReasonLost), `{"ok":false,"content":"","error":"the replica running the job stopped renewing its lease"}`)...)
	if t.Lost, err = collect(rows, err, scanJob); err != nil {
		return err
	}
	// A pending job waited in the dead replica's memory, a session's job
	// for its sandbox: neither can run elsewhere. Their approvals end.
	var lost []string
	for _, j := range t.Lost {
		lost = append(lost, j.ID)
	}
	if len(lost) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE approvals SET state = 'expired', decided_at = `+dbNow+`,
			decision_reason = 'the replica holding the call stopped renewing its lease'
			WHERE job_id = ANY($1) AND state = 'pending'`, lost); err != nil {
			return err
		}
	}
	rows, err = tx.Query(ctx, `UPDATE jobs SET owner = '', owner_epoch = 0
		WHERE `+owned+` AND state = 'queued' AND session_id = '' RETURNING `+jobColumns, args...)
	if t.Requeued, err = collect(rows, err, scanJob); err != nil {
		return err
	}
	t.Requeued = append(t.Requeued, again...)
	// A finished job's callback that was being retried in the dead
	// replica's memory passes to the taker: unowned, so that only the
	// taker's (unfenced-owner) writes of its attempts land.
	rows, err = tx.Query(ctx, `UPDATE jobs SET owner = '', owner_epoch = 0
		WHERE `+owned+` AND state IN ('succeeded', 'failed', 'cancelled') AND (callback::jsonb ->> 'state') = 'pending'
		RETURNING `+jobColumns, args...)
	if t.Callbacks, err = collect(rows, err, scanJob); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `UPDATE sessions SET state = 'closed', reason = 'lost', closed_at = `+dbNow+`
		WHERE `+owned+` AND state IN ('creating', 'active') RETURNING `+sessionColumns, args...)
	t.Sessions, err = collect(rows, err, scanSession)
	return err
}

// takeOverBatches makes by the owner of the unfinished batches matching
// owned (over args), into t.Batches: in the takeover's transaction, so
// exactly one replica resumes each.
func takeOverBatches(ctx context.Context, tx pgx.Tx, t *Takeover, by Lease, owned string, args ...any) error {
	n := len(args)
	rows, err := tx.Query(ctx, fmt.Sprintf(`UPDATE batches SET owner = $%d, owner_epoch = $%d
		WHERE `+owned+` AND state != 'completed' RETURNING `+batchColumns, n+1, n+2),
		append(args, by.Replica, by.Epoch)...)
	t.Batches, err = collect(rows, err, scanBatch)
	return err
}

// CreateOwned implements job.Coordinator: Store.Create recording l as the
// job's owner, in one statement that inserts nothing unless l is live.
func (s *Postgres) CreateOwned(ctx context.Context, l Lease, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO jobs (`+jobColumns+`, owner, owner_epoch)
		SELECT $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, $10::text,
			$11::text, $12::text, $13::text, $14::integer, $15::bigint, $16::bigint, $17::bigint, $18::text,
			$19::text, $20::text, $21::text, $22::text, $23::text, $24::boolean, $25::text, $26::boolean, $1::text, $2::bigint
		WHERE `+validLease,
		l.Replica, l.Epoch, r.id, r.tenant, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.createdAt, r.startedAt, r.finishedAt, r.sessionID,
		r.guard, r.egress, r.callback, r.tags, r.metadata, r.cached, r.hooks, r.retry)
	if pgUnique(err) {
		return fmt.Errorf("create job %s: %w: id or idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return pgErr("create job "+j.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("create job %s by %s epoch %d: %w", j.ID, l.Replica, l.Epoch, ErrLeaseLost)
	}
	return nil
}

// JobOwner implements job.Coordinator: the live lease holding job id,
// its own owner or, for a session's job not started yet, its session's.
func (s *Postgres) JobOwner(ctx context.Context, id string) (Lease, error) {
	var l Lease
	var exp int64
	err := s.pool.QueryRow(ctx, `SELECT r.id, r.epoch, r.address, r.lease_expires_at
		FROM jobs j LEFT JOIN sessions ss ON j.owner = '' AND ss.id = j.session_id
		JOIN replicas r ON (r.id = j.owner AND r.epoch = j.owner_epoch) OR (r.id = ss.owner AND r.epoch = ss.owner_epoch)
		WHERE j.id = $1 AND r.lease_expires_at > `+dbNow+` LIMIT 1`, id).Scan(&l.Replica, &l.Epoch, &l.Address, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("owner of job %s: %w", id, job.ErrNotFound)
	}
	if err != nil {
		return Lease{}, pgErr("owner of job "+id, err)
	}
	l.Expires = time.Unix(0, exp).UTC()
	return l, nil
}

// SetJobOwner implements job.Coordinator.
func (s *Postgres) SetJobOwner(ctx context.Context, l Lease, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET owner = $1, owner_epoch = $2 WHERE id = $3 AND owner = '' AND `+validLease,
		l.Replica, l.Epoch, id)
	if err != nil {
		return pgErr("own job "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("own job %s by %s epoch %d: %w", id, l.Replica, l.Epoch, ErrFenced)
	}
	return nil
}
