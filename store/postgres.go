package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

var _ job.Store = (*Postgres)(nil)

// Postgres is a job.Store in a PostgreSQL database (pgx), shared by every
// replica configured with the same URL. The schema is the SQLite one with
// BIGINT unix nanoseconds, TEXT JSON and BYTEA data, so both backends
// answer alike (store/storetest runs one suite against both).
type Postgres struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	owner *owner // HoldOwner's lock, nil without
}

// IsPostgresURL reports whether s selects the Postgres backend
// (postgres:// or postgresql://).
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// RedactURL is u without its password, for logs and errors.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return p.Redacted()
}

// defaultPoolConns is the connection pool's size when the URL gives no
// pool_max_conns.
const defaultPoolConns = 16

// OpenPostgres connects to the database at url (postgres://...; pgx's
// parameters such as pool_max_conns apply) and applies the pending
// migrations under an advisory lock, so replicas starting together
// migrate once. A database whose schema is newer than this binary is
// refused (ErrSchemaTooNew).
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", RedactURL(dsn), errors.New("invalid postgres URL"))
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "sandboxd"
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgx's default is the number of CPUs (at least 4): fewer than
		// the job service's workers and event writer need at once.
		cfg.MaxConns = defaultPoolConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", RedactURL(dsn), err)
	}
	s := &Postgres{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w", RedactURL(dsn), err)
	}
	return s, nil
}

// Close closes the pool. Calls after the first are no-ops.
func (s *Postgres) Close() error {
	s.mu.Lock()
	o := s.owner
	s.mu.Unlock()
	if o != nil {
		o.close()
	}
	s.pool.Close()
	return nil
}

// Pool is the connection pool (the replica coordination shares it).
func (s *Postgres) Pool() *pgxpool.Pool { return s.pool }

// pgMigrationLock is the advisory lock key migrations hold ("sandboxd"
// in ASCII).
const pgMigrationLock = 0x73616e64626f7864

// pgMigrations are Postgres's migrations; pgMigrations[i] is version i+1.
// Like migrations (SQLite): never edit a released one, append.
var pgMigrations = []string{
	// 1: the schema of SQLite's migrations 1-5.
	`CREATE TABLE jobs (
		id              TEXT    PRIMARY KEY,
		tenant          TEXT    NOT NULL,
		tool            TEXT    NOT NULL,
		call_id         TEXT    NOT NULL DEFAULT '',
		args            TEXT    NOT NULL DEFAULT 'null',
		idempotency_key TEXT,
		runner          TEXT    NOT NULL DEFAULT '',
		limits          TEXT    NOT NULL DEFAULT '{}',
		state           TEXT    NOT NULL,
		reason          TEXT    NOT NULL DEFAULT '',
		result          TEXT,
		attempts        INTEGER NOT NULL DEFAULT 0,
		created_at      BIGINT  NOT NULL,
		started_at      BIGINT,
		finished_at     BIGINT,
		session_id      TEXT    NOT NULL DEFAULT '',
		guard           TEXT,
		egress          TEXT,
		callback        TEXT
	);
	CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
	CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at DESC, id DESC);
	CREATE INDEX jobs_unfinished ON jobs (state, created_at) WHERE state IN ('queued', 'running', 'pending_approval');
	CREATE INDEX jobs_guarded ON jobs (created_at) WHERE guard IS NOT NULL;
	CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'cancelled');
	CREATE INDEX jobs_session_created ON jobs (session_id, created_at) WHERE session_id != '';
	CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
	CREATE INDEX jobs_callback_pending ON jobs (finished_at) WHERE (callback::jsonb ->> 'state') = 'pending';
	CREATE TABLE sessions (
		id           TEXT    PRIMARY KEY,
		tenant       TEXT    NOT NULL,
		image        TEXT    NOT NULL DEFAULT '',
		effects      TEXT    NOT NULL DEFAULT '[]',
		limits       TEXT    NOT NULL DEFAULT '{}',
		state        TEXT    NOT NULL,
		reason       TEXT    NOT NULL DEFAULT '',
		ttl          BIGINT  NOT NULL DEFAULT 0,
		idle_timeout BIGINT  NOT NULL DEFAULT 0,
		created_at   BIGINT  NOT NULL,
		expires_at   BIGINT  NOT NULL,
		last_used_at BIGINT  NOT NULL,
		closed_at    BIGINT
	);
	CREATE INDEX sessions_tenant_created ON sessions (tenant, created_at DESC, id DESC);
	CREATE INDEX sessions_open ON sessions (state) WHERE state IN ('creating', 'active');
	CREATE TABLE approvals (
		id              TEXT    PRIMARY KEY,
		tenant          TEXT    NOT NULL,
		job_id          TEXT    NOT NULL UNIQUE,
		session_id      TEXT    NOT NULL DEFAULT '',
		tool            TEXT    NOT NULL,
		args            TEXT    NOT NULL DEFAULT 'null',
		effects         TEXT    NOT NULL DEFAULT '[]',
		rule            TEXT    NOT NULL DEFAULT '',
		reason          TEXT    NOT NULL DEFAULT '',
		state           TEXT    NOT NULL,
		created_at      BIGINT  NOT NULL,
		expires_at      BIGINT  NOT NULL,
		decided_at      BIGINT,
		decision_reason TEXT    NOT NULL DEFAULT ''
	);
	CREATE INDEX approvals_tenant_created ON approvals (tenant, created_at DESC, id DESC);
	CREATE INDEX approvals_pending ON approvals (expires_at) WHERE state = 'pending';
	CREATE TABLE job_events (
		job_id TEXT   NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
		seq    INTEGER NOT NULL,
		type   TEXT   NOT NULL,
		time   BIGINT NOT NULL,
		data   BYTEA  NOT NULL DEFAULT '',
		PRIMARY KEY (job_id, seq)
	);
	CREATE TABLE artifacts (
		job_id    TEXT   NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
		name      TEXT   NOT NULL,
		mime_type TEXT   NOT NULL,
		size      BIGINT NOT NULL,
		data      BYTEA  NOT NULL,
		PRIMARY KEY (job_id, name)
	);`,
	// 2: replicas: their leases, and which one owns a job or a session
	// (lease.go).
	`CREATE TABLE replicas (
		id               TEXT   PRIMARY KEY,
		epoch            BIGINT NOT NULL,
		address          TEXT   NOT NULL DEFAULT '',
		lease_expires_at BIGINT NOT NULL,
		joined_at        BIGINT NOT NULL
	);
	ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN owner_epoch BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE sessions ADD COLUMN owner_epoch BIGINT NOT NULL DEFAULT 0;
	CREATE INDEX jobs_claimable ON jobs (created_at, id) WHERE state = 'queued' AND owner = '';
	CREATE INDEX jobs_owner ON jobs (owner) WHERE owner != '';
	CREATE INDEX sessions_owner ON sessions (owner) WHERE owner != '';`,
	// 3: a client's tags (JSON array) and metadata (JSON object) on jobs
	// and sessions, NULL when none (SQLite's migration 6).
	`ALTER TABLE jobs ADD COLUMN tags TEXT;
	ALTER TABLE jobs ADD COLUMN metadata TEXT;
	ALTER TABLE sessions ADD COLUMN tags TEXT;
	ALTER TABLE sessions ADD COLUMN metadata TEXT;`,
	// 4: a job answered from the result cache, and its tool hooks'
	// requests (SQLite's migrations 7 and 8).
	`ALTER TABLE jobs ADD COLUMN cached BOOLEAN NOT NULL DEFAULT false;
	ALTER TABLE jobs ADD COLUMN hooks TEXT;`,
	// 5: turn batches and the jobs reserved for their calls (SQLite's
	// migration 9).
	`CREATE TABLE IF NOT EXISTS batches (
		id              TEXT   PRIMARY KEY,
		tenant          TEXT   NOT NULL,
		idempotency_key TEXT,
		session_id      TEXT   NOT NULL DEFAULT '',
		state           TEXT   NOT NULL,
		created_at      BIGINT NOT NULL,
		finished_at     BIGINT,
		record          TEXT   NOT NULL
	);
	CREATE UNIQUE INDEX IF NOT EXISTS batches_idempotency
		ON batches (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
	CREATE INDEX IF NOT EXISTS batches_unfinished
		ON batches (created_at) WHERE state != 'completed';
	CREATE INDEX IF NOT EXISTS batches_finished
		ON batches (finished_at) WHERE state = 'completed';
	CREATE TABLE IF NOT EXISTS batch_jobs (
		batch_id TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
		job_id   TEXT NOT NULL,
		PRIMARY KEY (batch_id, job_id)
	);`,
	// 6: the guard's counters, checked and spent with a job's insert
	// (guard_spend.go).
	pgGuardMigration,
	// 7: the replica running a batch, fenced like a job's (batches.go):
	// a replica taking over a dead one resumes its unfinished batches.
	`ALTER TABLE batches ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE batches ADD COLUMN IF NOT EXISTS owner_epoch BIGINT NOT NULL DEFAULT 0;
	CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner) WHERE state != 'completed';`,
	// 8: the call may run again after an infrastructure failure, and
	// after its replica died while it ran (SQLite's migration 10).
	`ALTER TABLE jobs ADD COLUMN IF NOT EXISTS retry BOOLEAN NOT NULL DEFAULT false;`,
}

// migrate brings the schema to the latest version, holding the
// migration advisory lock on one connection for the whole run.
func (s *Postgres) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return pgErr("connect", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(pgMigrationLock)); err != nil {
		return pgErr("migration lock", err)
	}
	defer func() {
		// A fresh context: the caller's may be done, and a lock left held
		// would stall the next replica until this connection closes.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, int64(pgMigrationLock)); err != nil {
			conn.Conn().Close(uctx) // closing the session releases the lock
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT  NOT NULL
	)`); err != nil {
		return pgErr("create schema_migrations", err)
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return pgErr("schema version", err)
	}
	if err := checkSchemaVersion(have, len(pgMigrations)); err != nil {
		return err
	}
	for v := have + 1; v <= len(pgMigrations); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgMigrations[v-1]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`,
				v, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return pgErr(fmt.Sprintf("migration %d", v), err)
		}
	}
	return nil
}

// pgRow maps pgx's no-rows error to database/sql's, which the shared scan
// functions test for.
type pgRow struct{ pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// collect scans every row with scan.
func collect[T any](rows pgx.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// pgErr wraps a failed operation's error: a database that cannot be
// reached or cannot take writes (connection refused or lost, shutting
// down, too many connections, disk full) is job.ErrStoreUnavailable, so
// the API answers 503 for new work.
func pgErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, job.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller's deadline: not the database's fault.
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),                           // insufficient resources: disk full, out of memory, too many connections
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // admin shutdown, crash shutdown, cannot connect now
			pe.Code == "25006": // read-only transaction (a standby)
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || pgconn.Timeout(err)
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func pgUnique(err error) bool     { return pgCode(err) == "23505" }
func pgForeignKey(err error) bool { return pgCode(err) == "23503" }

// Create implements job.Store.
func (s *Postgres) Create(ctx context.Context, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO jobs (`+jobColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)`,
		r.id, r.tenant, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.createdAt, r.startedAt, r.finishedAt, r.sessionID,
		r.guard, r.egress, r.callback, r.tags, r.metadata, r.cached, r.hooks, r.retry)
	if pgUnique(err) {
		return fmt.Errorf("create job %s: %w: id or idempotency key already used", j.ID, job.ErrConflict)
	}
	return pgErr("create job "+j.ID, err)
}

// Get implements job.Store.
func (s *Postgres) Get(ctx context.Context, id string) (*job.Job, error) {
	j, err := scanJob(pgRow{s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id)})
	if err != nil {
		return nil, pgErr("get job "+id, err)
	}
	return j, nil
}

// GetByIdempotencyKey implements job.Store.
func (s *Postgres) GetByIdempotencyKey(ctx context.Context, tenant, key string) (*job.Job, error) {
	if key == "" {
		return nil, fmt.Errorf("get job by idempotency key: %w", job.ErrNotFound)
	}
	j, err := scanJob(pgRow{s.pool.QueryRow(ctx,
		`SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND idempotency_key = $2`, tenant, key)})
	if err != nil {
		return nil, pgErr("get job by idempotency key", err)
	}
	return j, nil
}

// Update implements job.Store.
func (s *Postgres) Update(ctx context.Context, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET
		tool = $1, call_id = $2, args = $3, idempotency_key = $4, runner = $5, limits = $6,
		state = $7, reason = $8, result = $9, attempts = $10, started_at = $11, finished_at = $12,
		guard = $13, egress = $14, callback = $15, tags = $16, metadata = $17, cached = $18, hooks = $19
		WHERE id = $20`,
		r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.startedAt, r.finishedAt, r.guard, r.egress, r.callback,
		r.tags, r.metadata, r.cached, r.hooks, r.id)
	if pgUnique(err) {
		return fmt.Errorf("update job %s: %w: idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return pgErr("update job "+j.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update job %s: %w", j.ID, job.ErrNotFound)
	}
	return nil
}

// pgList runs a page on Postgres.
func pgList[T any](ctx context.Context, s *Postgres, p page, scan func(scanner) (T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	query, args, limit, err := p.sql(true)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, query, args...)
	out, err := collect(rows, err, scan)
	if err != nil {
		return nil, "", pgErr("list "+p.what, err)
	}
	out, next := nextPage(out, limit, key)
	return out, next, nil
}

// List implements job.Store.
func (s *Postgres) List(ctx context.Context, tenant string, f job.ListFilter) ([]*job.Job, string, error) {
	return pgList(ctx, s, page{
		what: "jobs", table: "jobs", columns: jobColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:    [][2]string{{"tool", f.Tool}, {"state", string(f.State)}, {"session_id", f.SessionID}},
		since: f.Since, until: f.Until, labels: f.LabelFilter,
		limit: f.Limit, cursor: f.Cursor,
	}, scanJob, func(j *job.Job) (time.Time, string) { return j.CreatedAt, j.ID })
}

// ListUnfinished implements job.Store.
func (s *Postgres) ListUnfinished(ctx context.Context) ([]*job.Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE state IN ('queued', 'running', 'pending_approval') ORDER BY created_at, id`)
	jobs, err := collect(rows, err, scanJob)
	return jobs, pgErr("list unfinished jobs", err)
}

// ListPendingCallbacks implements job.Store.
func (s *Postgres) ListPendingCallbacks(ctx context.Context) ([]*job.Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE (callback::jsonb ->> 'state') = 'pending' AND state IN ('succeeded', 'failed', 'cancelled')
		ORDER BY finished_at, id`)
	jobs, err := collect(rows, err, scanJob)
	return jobs, pgErr("list pending callbacks", err)
}

// CreateSession implements job.Store.
func (s *Postgres) CreateSession(ctx context.Context, ss *job.Session) error {
	eff, err := json.Marshal(ss.Effects)
	if err != nil {
		return fmt.Errorf("create session %s: %w", ss.ID, err)
	}
	lim, err := json.Marshal(ss.Limits)
	if err != nil {
		return fmt.Errorf("create session %s: %w", ss.ID, err)
	}
	tags, md, err := encodeLabels(ss.Tags, ss.Metadata)
	if err != nil {
		return fmt.Errorf("create session %s: %w", ss.ID, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO sessions (`+sessionColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		ss.ID, ss.Tenant, ss.Image, string(eff), string(lim), string(ss.State), ss.Reason,
		int64(ss.TTL), int64(ss.IdleTimeout), ss.CreatedAt.UnixNano(), ss.ExpiresAt.UnixNano(),
		ss.LastUsedAt.UnixNano(), nullTime(ss.ClosedAt), tags, md)
	if pgUnique(err) {
		return fmt.Errorf("create session %s: %w: id already used", ss.ID, job.ErrConflict)
	}
	return pgErr("create session "+ss.ID, err)
}

// GetSession implements job.Store.
func (s *Postgres) GetSession(ctx context.Context, id string) (*job.Session, error) {
	ss, err := scanSession(pgRow{s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id)})
	if err != nil {
		return nil, pgErr("get session "+id, err)
	}
	return ss, nil
}

// UpdateSession implements job.Store.
func (s *Postgres) UpdateSession(ctx context.Context, ss *job.Session) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sessions SET state = $1, reason = $2, last_used_at = $3, closed_at = $4
		WHERE id = $5`, string(ss.State), ss.Reason, ss.LastUsedAt.UnixNano(), nullTime(ss.ClosedAt), ss.ID)
	if err != nil {
		return pgErr("update session "+ss.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update session %s: %w", ss.ID, job.ErrNotFound)
	}
	return nil
}

// ListSessions implements job.Store.
func (s *Postgres) ListSessions(ctx context.Context, tenant string, f job.SessionFilter) ([]*job.Session, string, error) {
	return pgList(ctx, s, page{
		what: "sessions", table: "sessions", columns: sessionColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:     [][2]string{{"state", string(f.State)}},
		labels: f.LabelFilter,
		limit:  f.Limit, cursor: f.Cursor,
	}, scanSession, func(x *job.Session) (time.Time, string) { return x.CreatedAt, x.ID })
}

// ListOpenSessions implements job.Store.
func (s *Postgres) ListOpenSessions(ctx context.Context) ([]*job.Session, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE state IN ('creating', 'active') ORDER BY created_at, id`)
	out, err := collect(rows, err, scanSession)
	return out, pgErr("list open sessions", err)
}

// CreateApproval implements job.Store.
func (s *Postgres) CreateApproval(ctx context.Context, a *job.Approval) error {
	eff, err := json.Marshal(a.Effects)
	if err != nil {
		return fmt.Errorf("create approval %s: %w", a.ID, err)
	}
	args := "null"
	if len(a.Arguments) > 0 {
		if !json.Valid(a.Arguments) {
			return fmt.Errorf("create approval %s: %w: arguments are not valid JSON", a.ID, job.ErrInvalid)
		}
		args = string(a.Arguments)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO approvals (`+approvalColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		a.ID, a.Tenant, a.JobID, a.SessionID, a.Tool, args, string(eff), a.Rule, a.Reason, string(a.State),
		a.CreatedAt.UnixNano(), a.ExpiresAt.UnixNano(), nullTime(a.DecidedAt), a.DecisionReason)
	if pgUnique(err) {
		return fmt.Errorf("create approval %s: %w: id or job already has one", a.ID, job.ErrConflict)
	}
	return pgErr("create approval "+a.ID, err)
}

// GetApproval implements job.Store.
func (s *Postgres) GetApproval(ctx context.Context, id string) (*job.Approval, error) {
	a, err := scanApproval(pgRow{s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id)})
	if err != nil {
		return nil, pgErr("get approval "+id, err)
	}
	return a, nil
}

// DecideApproval implements job.Store: only a row still pending changes,
// so two deciders (on any replicas) cannot both win.
func (s *Postgres) DecideApproval(ctx context.Context, a *job.Approval) error {
	tag, err := s.pool.Exec(ctx, `UPDATE approvals SET state = $1, decided_at = $2, decision_reason = $3
		WHERE id = $4 AND state = 'pending'`, string(a.State), nullTime(a.DecidedAt), a.DecisionReason, a.ID)
	if err != nil {
		return pgErr("decide approval "+a.ID, err)
	}
	if tag.RowsAffected() == 0 {
		if _, gerr := s.GetApproval(ctx, a.ID); gerr != nil {
			return fmt.Errorf("decide approval %s: %w", a.ID, gerr)
		}
		return fmt.Errorf("decide approval %s: %w: it is no longer pending", a.ID, job.ErrConflict)
	}
	return nil
}

// ListApprovals implements job.Store.
func (s *Postgres) ListApprovals(ctx context.Context, tenant string, f job.ApprovalFilter) ([]*job.Approval, string, error) {
	return pgList(ctx, s, page{
		what: "approvals", table: "approvals", columns: approvalColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:    [][2]string{{"state", string(f.State)}},
		limit: f.Limit, cursor: f.Cursor,
	}, scanApproval, func(a *job.Approval) (time.Time, string) { return a.CreatedAt, a.ID })
}

// ListPendingApprovals implements job.Store.
func (s *Postgres) ListPendingApprovals(ctx context.Context) ([]*job.Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE state = 'pending' ORDER BY created_at, id`)
	out, err := collect(rows, err, scanApproval)
	return out, pgErr("list pending approvals", err)
}

// ListSpends implements job.Store.
func (s *Postgres) ListSpends(ctx context.Context, since time.Time) ([]policy.Spend, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, guard FROM jobs
		WHERE guard IS NOT NULL AND created_at >= $1`, since.UnixNano())
	type rec struct{ id, raw string }
	recs, err := collect(rows, err, func(sc scanner) (rec, error) {
		var r rec
		return r, sc.Scan(&r.id, &r.raw)
	})
	if err != nil {
		return nil, pgErr("list spends", err)
	}
	var out []policy.Spend
	for _, r := range recs {
		var g job.GuardRecord
		if err := json.Unmarshal([]byte(r.raw), &g); err != nil {
			return nil, fmt.Errorf("list spends: decode guard of job %s: %w", r.id, err)
		}
		if !g.Refunded {
			out = append(out, g.Spend...)
		}
	}
	return out, nil
}

// AppendEvents implements job.Store: a batch of up to maxEventsPerInsert
// events is one multi-row INSERT (one statement is atomic: one round
// trip, no BEGIN and COMMIT); a larger one is a transaction of such
// INSERTs.
func (s *Postgres) AppendEvents(ctx context.Context, evs []job.EventRecord) error {
	if len(evs) == 0 {
		return nil
	}
	var err error
	if len(evs) <= maxEventsPerInsert {
		q, args := eventsInsert(evs)
		_, err = s.pool.Exec(ctx, q, args...)
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for rest := evs; len(rest) > 0; {
				n := min(len(rest), maxEventsPerInsert)
				q, args := eventsInsert(rest[:n])
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
				rest = rest[n:]
			}
			return nil
		})
	}
	if pgForeignKey(err) {
		return fmt.Errorf("append events: %w: no such job", job.ErrNotFound)
	}
	return pgErr("append events", err)
}

// eventsInsert is one INSERT of evs, keeping events already recorded.
func eventsInsert(evs []job.EventRecord) (string, []any) {
	var q strings.Builder
	q.WriteString(`INSERT INTO job_events (job_id, seq, type, time, data) VALUES `)
	args := make([]any, 0, 5*len(evs))
	for i, ev := range evs {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d)", 5*i+1, 5*i+2, 5*i+3, 5*i+4, 5*i+5)
		args = append(args, ev.JobID, ev.Seq, string(ev.Type), ev.Time.UnixNano(), []byte(ev.Data))
	}
	q.WriteString(` ON CONFLICT (job_id, seq) DO NOTHING`)
	return q.String(), args
}

// ListEvents implements job.Store.
func (s *Postgres) ListEvents(ctx context.Context, jobID string, after, limit int) ([]job.EventRecord, error) {
	switch {
	case limit <= 0:
		limit = 256
	case limit > 1000:
		limit = 1000
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, type, time, data FROM job_events
		WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, jobID, after, limit)
	out, err := collect(rows, err, func(sc scanner) (job.EventRecord, error) {
		var (
			ev   = job.EventRecord{JobID: jobID}
			typ  string
			ts   int64
			data []byte
		)
		err := sc.Scan(&ev.Seq, &typ, &ts, &data)
		ev.Type, ev.Time, ev.Data = job.EventType(typ), time.Unix(0, ts).UTC(), string(data)
		return ev, err
	})
	return out, pgErr("list events of job "+jobID, err)
}

// PutArtifact implements job.Store.
func (s *Postgres) PutArtifact(ctx context.Context, jobID string, a tools.Artifact) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO artifacts (job_id, name, mime_type, size, data)
		VALUES ($1, $2, $3, $4, $5)`, jobID, a.Name, a.MimeType, int64(len(a.Data)), nonNil(a.Data))
	switch {
	case pgForeignKey(err):
		return fmt.Errorf("put artifact %s of job %s: %w", a.Name, jobID, job.ErrNotFound)
	case pgUnique(err):
		return fmt.Errorf("put artifact %s of job %s: %w: name already used", a.Name, jobID, job.ErrConflict)
	}
	return pgErr(fmt.Sprintf("put artifact %s of job %s", a.Name, jobID), err)
}

// GetArtifact implements job.Store.
func (s *Postgres) GetArtifact(ctx context.Context, jobID, name string) (*tools.Artifact, error) {
	a := &tools.Artifact{Name: name}
	err := s.pool.QueryRow(ctx, `SELECT mime_type, size, data FROM artifacts WHERE job_id = $1 AND name = $2`,
		jobID, name).Scan(&a.MimeType, &a.Size, &a.Data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get artifact %s of job %s: %w", name, jobID, job.ErrNotFound)
	}
	if err != nil {
		return nil, pgErr(fmt.Sprintf("get artifact %s of job %s", name, jobID), err)
	}
	return a, nil
}

// DeleteFinishedJobs implements job.Store: one transaction per batch
// (events and artifacts go with their job by ON DELETE CASCADE;
// approvals are deleted explicitly). FOR UPDATE SKIP LOCKED lets two
// replicas' retention passes take disjoint batches.
func (s *Postgres) DeleteFinishedJobs(ctx context.Context, before, keepGuardedSince time.Time, limit int) (job.Deleted, error) {
	if limit <= 0 {
		limit = 100
	}
	var d job.Deleted
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		d = job.Deleted{}
		var n int64
		if err := pruneGuardCounters(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, OCTET_LENGTH(args) + COALESCE(OCTET_LENGTH(result), 0)
				+ COALESCE(OCTET_LENGTH(guard), 0) + COALESCE(OCTET_LENGTH(egress), 0)
			FROM jobs
			WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at < $1
				AND NOT (guard IS NOT NULL AND created_at >= $2)
			ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED`, before.UnixNano(), keepGuardedSince.UnixNano(), limit)
		type rec struct {
			id string
			n  int64
		}
		recs, err := collect(rows, err, func(sc scanner) (rec, error) {
			var r rec
			return r, sc.Scan(&r.id, &r.n)
		})
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				d.Batches, n, err = pgDeleteDeadBatches(ctx, tx, before, limit)
				d.Bytes += n
			}
		}()
		if len(recs) == 0 {
			return nil
		}
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.id
			d.Bytes += r.n
		}
		var ev, art int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(OCTET_LENGTH(data)), 0) FROM job_events WHERE job_id = ANY($1)`, ids).Scan(&ev); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0) FROM artifacts WHERE job_id = ANY($1)`, ids).Scan(&art); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM approvals WHERE job_id = ANY($1)`, ids); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM jobs WHERE id = ANY($1)`, ids); err != nil {
			return err
		}
		d.Jobs, d.Bytes = len(ids), d.Bytes+ev+art
		return nil
	})
	if err != nil {
		return job.Deleted{}, pgErr("delete finished jobs", err)
	}
	return d, nil
}

// Size implements job.Store: Bytes is the tables' and indexes' size;
// FileBytes the whole database's.
func (s *Postgres) Size(ctx context.Context) (job.StoreSize, error) {
	var out job.StoreSize
	err := s.pool.QueryRow(ctx, `SELECT
		COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT, pg_database_size(current_database())
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND n.nspname = current_schema()
			AND c.relname IN ('jobs', 'sessions', 'approvals', 'job_events', 'artifacts', 'batches', 'batch_jobs')`).Scan(&out.Bytes, &out.FileBytes)
	return out, pgErr("store size", err)
}

// Compact implements job.Store: Postgres's autovacuum makes deleted rows'
// space reusable; nothing to do.
func (s *Postgres) Compact(ctx context.Context) (int64, error) { return 0, nil }
