package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrSchemaTooNew: the database was migrated by a newer sandboxd than this
// one. Open refuses it rather than run against a schema it does not know
// (a downgrade needs the newer binary's data exported, or a backup).
var ErrSchemaTooNew = errors.New("the database schema is newer than this sandboxd")

// checkSchemaVersion refuses a database at version have when this binary
// knows versions up to known.
func checkSchemaVersion(have, known int) error {
	if have > known {
		return fmt.Errorf("%w: the database is at schema version %d, this sandboxd knows versions up to %d; "+
			"run the sandboxd that migrated it (or a newer one)", ErrSchemaTooNew, have, known)
	}
	return nil
}

// migrations are applied in order; migrations[i] is version i+1. Never edit
// a released migration: append a new one. Each runs in its own transaction
// together with the row recording it, so a crash leaves either both or
// neither, and re-running Open is a no-op.
var migrations = []string{
	// 1: jobs.
	`CREATE TABLE IF NOT EXISTS jobs (
		id              TEXT    PRIMARY KEY,
		tenant          TEXT    NOT NULL,
		tool            TEXT    NOT NULL,
		call_id         TEXT    NOT NULL DEFAULT '',
		args            TEXT    NOT NULL DEFAULT 'null',  -- JSON
		idempotency_key TEXT,                             -- NULL when none
		runner          TEXT    NOT NULL DEFAULT '',
		limits          TEXT    NOT NULL DEFAULT '{}',    -- JSON runner.Limits
		state           TEXT    NOT NULL,
		reason          TEXT    NOT NULL DEFAULT '',
		result          TEXT,                             -- JSON tools.Result, NULL when none
		attempts        INTEGER NOT NULL DEFAULT 0,
		created_at      INTEGER NOT NULL,                 -- unix nanoseconds, UTC
		started_at      INTEGER,
		finished_at     INTEGER
	);
	CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency
		ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
	CREATE INDEX IF NOT EXISTS jobs_tenant_created
		ON jobs (tenant, created_at DESC, id DESC);
	CREATE INDEX IF NOT EXISTS jobs_unfinished
		ON jobs (state, created_at) WHERE state IN ('queued', 'running');`,
	// 2: sessions, and the session a job runs in.
	`ALTER TABLE jobs ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
	CREATE TABLE IF NOT EXISTS sessions (
		id           TEXT    PRIMARY KEY,
		tenant       TEXT    NOT NULL,
		image        TEXT    NOT NULL DEFAULT '',
		effects      TEXT    NOT NULL DEFAULT '[]',  -- JSON []tools.Effect
		limits       TEXT    NOT NULL DEFAULT '{}',  -- JSON runner.Limits
		state        TEXT    NOT NULL,
		reason       TEXT    NOT NULL DEFAULT '',
		ttl          INTEGER NOT NULL DEFAULT 0,     -- nanoseconds
		idle_timeout INTEGER NOT NULL DEFAULT 0,     -- nanoseconds
		created_at   INTEGER NOT NULL,               -- unix nanoseconds, UTC
		expires_at   INTEGER NOT NULL,
		last_used_at INTEGER NOT NULL,
		closed_at    INTEGER
	);
	CREATE INDEX IF NOT EXISTS sessions_tenant_created
		ON sessions (tenant, created_at DESC, id DESC);
	CREATE INDEX IF NOT EXISTS sessions_open
		ON sessions (state) WHERE state IN ('creating', 'active');`,
	`ALTER TABLE jobs ADD COLUMN guard TEXT;   -- JSON job.GuardRecord, NULL without a policy
	ALTER TABLE jobs ADD COLUMN egress TEXT;  -- JSON []job.EgressRecord, NULL when none
	DROP INDEX IF EXISTS jobs_unfinished;
	CREATE INDEX IF NOT EXISTS jobs_unfinished
		ON jobs (state, created_at) WHERE state IN ('queued', 'running', 'pending_approval');
	CREATE INDEX IF NOT EXISTS jobs_guarded
		ON jobs (created_at) WHERE guard IS NOT NULL;
	CREATE TABLE IF NOT EXISTS approvals (
		id              TEXT    PRIMARY KEY,
		tenant          TEXT    NOT NULL,
		job_id          TEXT    NOT NULL UNIQUE,
		session_id      TEXT    NOT NULL DEFAULT '',
		tool            TEXT    NOT NULL,
		args            TEXT    NOT NULL DEFAULT 'null',  -- JSON
		effects         TEXT    NOT NULL DEFAULT '[]',    -- JSON []tools.Effect
		rule            TEXT    NOT NULL DEFAULT '',
		reason          TEXT    NOT NULL DEFAULT '',
		state           TEXT    NOT NULL,
		created_at      INTEGER NOT NULL,                 -- unix nanoseconds, UTC
		expires_at      INTEGER NOT NULL,
		decided_at      INTEGER,
		decision_reason TEXT    NOT NULL DEFAULT ''
	);
	CREATE INDEX IF NOT EXISTS approvals_tenant_created
		ON approvals (tenant, created_at DESC, id DESC);
	CREATE INDEX IF NOT EXISTS approvals_pending
		ON approvals (expires_at) WHERE state = 'pending';`,
	// 4: job events and artifacts (one source for SSE replay and timelines;
	// artifacts never inlined in a result), and the index retention walks.
	`CREATE TABLE IF NOT EXISTS job_events (
		job_id TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
		seq    INTEGER NOT NULL,
		type   TEXT    NOT NULL,
		time   INTEGER NOT NULL,                 -- unix nanoseconds, UTC
		data   BLOB    NOT NULL DEFAULT x'',     -- output chunk (may split UTF-8)
		PRIMARY KEY (job_id, seq)
	);
	CREATE TABLE IF NOT EXISTS artifacts (
		job_id    TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
		name      TEXT    NOT NULL,
		mime_type TEXT    NOT NULL,
		size      INTEGER NOT NULL,
		data      BLOB    NOT NULL,
		PRIMARY KEY (job_id, name)
	);
	CREATE INDEX IF NOT EXISTS jobs_finished
		ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'cancelled');`,
	`ALTER TABLE jobs ADD COLUMN callback TEXT; -- JSON job.Callback, NULL when none
	CREATE INDEX IF NOT EXISTS jobs_session_created
		ON jobs (session_id, created_at) WHERE session_id != '';
	CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at DESC, id DESC);
	CREATE INDEX IF NOT EXISTS jobs_callback_pending
		ON jobs (finished_at) WHERE json_extract(callback, '$.state') = 'pending';`,
	// 6: a client's tags (JSON array) and metadata (JSON object) on jobs
	// and sessions, NULL when none.
	`ALTER TABLE jobs ADD COLUMN tags TEXT;
	ALTER TABLE jobs ADD COLUMN metadata TEXT;
	ALTER TABLE sessions ADD COLUMN tags TEXT;
	ALTER TABLE sessions ADD COLUMN metadata TEXT;`,
	// 7: a job answered from the result cache.
	`ALTER TABLE jobs ADD COLUMN cached INTEGER NOT NULL DEFAULT 0;`,
	// 8: the tool hooks' requests of a job.
	`ALTER TABLE jobs ADD COLUMN hooks TEXT; -- JSON []job.HookRecord, NULL when none`,
	// 9: turn batches (job.BatchRecord) and the jobs reserved for their
	// calls, which retention joins with jobs.
	`CREATE TABLE IF NOT EXISTS batches (
		id              TEXT    PRIMARY KEY,
		tenant          TEXT    NOT NULL,
		idempotency_key TEXT,                  -- NULL when none
		session_id      TEXT    NOT NULL DEFAULT '',
		state           TEXT    NOT NULL,
		created_at      INTEGER NOT NULL,      -- unix nanoseconds, UTC
		finished_at     INTEGER,
		record          TEXT    NOT NULL       -- JSON: dialect, mode, calls, final answer, labels, callback
	);
	CREATE UNIQUE INDEX IF NOT EXISTS batches_idempotency
		ON batches (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
	CREATE INDEX IF NOT EXISTS batches_unfinished
		ON batches (created_at) WHERE state != 'completed';
	CREATE INDEX IF NOT EXISTS batches_finished
		ON batches (finished_at) WHERE state = 'completed';
	CREATE TABLE IF NOT EXISTS batch_jobs (
		batch_id TEXT NOT NULL,
		job_id   TEXT NOT NULL,
		PRIMARY KEY (batch_id, job_id)
	);`,
	// 10: the call may run again after an infrastructure failure, and
	// after its process died while it ran (job.Job.Retry).
	`ALTER TABLE jobs ADD COLUMN retry INTEGER NOT NULL DEFAULT 0;`,
}

// migrate brings the schema to the latest version.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := db.QueryRowContext(ctx, `SELECT IFNULL(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if err := checkSchemaVersion(have, len(migrations)); err != nil {
		return err
	}
	for i, stmt := range migrations {
		if err := apply(ctx, db, i+1, stmt); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	return nil
}

func apply(ctx context.Context, db *sql.DB, version int, stmt string) (err error) {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock): one migrator at a time
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		version, time.Now().UnixNano()); err != nil {
		return err
	}
	return tx.Commit()
}
