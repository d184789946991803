// Package store keeps sandboxd's durable records. SQLite (embedded, pure Go
// via modernc.org/sqlite) is the default backend; Postgres (pgx,
// postgres.go) the shared one. Both implement job.Store and pass one
// conformance suite (store/storetest).
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store/internal/groupcommit"
)

var _ job.Store = (*SQLite)(nil)

// SQLite is a job.Store in one SQLite database file. It is safe for
// concurrent use; the caller that opened it must Close it after the job
// service has shut down.
type SQLite struct {
	path string
	// db serves reads from a small pool (WAL allows many readers).
	db *sql.DB
	// w is the only writer: one connection, so writers queue in Go rather
	// than spin in SQLite's busy handler, which collapsed throughput under
	// 200 concurrent submissions.
	w *sql.DB
	// Statements on the hot path are prepared once: parsing SQL was a sixth
	// of the daemon's CPU time under load.
	insert, update, get *sql.Stmt
	// group commits the job writes (Create, Update) of concurrent callers
	// in one transaction: a job's three writes (queued, running, finished)
	// were each a commit of their own, the daemon's largest CPU cost.
	group *groupcommit.Group[*sql.Tx]

	// The writer does not checkpoint the WAL itself (wal_autocheckpoint=0):
	// a checkpoint's fsync in a commit was the slowest 1% of job
	// latencies. checkpointLoop does it on a reader connection instead, which
	// WAL mode runs alongside the writer.
	stopCheckpoint chan struct{}
	// walRestart is the WAL size that forces a checkpoint (walRestartBytes;
	// smaller in tests).
	walRestart     int64
	checkpointDone chan struct{}
}

// groupMax bounds the job writes of one transaction; groupTimeout one
// transaction's time.
const (
	groupMax     = 128
	groupTimeout = 30 * time.Second
)

// GroupStats reports the group commit's writes, transactions and split
// batches so far.
func (s *SQLite) GroupStats() groupcommit.Stats { return s.group.Stats() }

// busyTimeout is how long a connection waits for a lock before
// SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// checkpointInterval is how often the WAL is copied back into the database.
const checkpointInterval = time.Second

// Open opens (creating if needed) the database at path and applies the
// pending migrations. The database runs in WAL mode with a busy timeout,
// foreign keys on and write transactions started IMMEDIATE, so concurrent
// writers wait for each other instead of failing with SQLITE_BUSY.
func Open(path string) (*SQLite, error) { return open(path, walRestartBytes) }

// open is Open with the WAL size that forces a checkpoint.
func open(path string, walRestart int64) (*SQLite, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open store: invalid path %q", path)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "NORMAL") // durable across process crashes in WAL mode
	q.Set("_txlock", "immediate")
	dsn := path + "?" + q.Encode()
	s := &SQLite{path: path, walRestart: walRestart}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	var err error
	if s.w, err = sql.Open("sqlite", dsn); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxIdleTime(0)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The writer opens the file first and migrates, so the WAL and the
	// schema exist before any reader connects.
	if err := s.w.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := incrementalVacuum(ctx, s.w); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := migrate(ctx, s.w); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if s.db, err = sql.Open("sqlite", dsn); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.db.SetMaxOpenConns(readConns)
	s.db.SetMaxIdleConns(readConns)
	s.db.SetConnMaxIdleTime(5 * time.Minute)
	for _, p := range []struct {
		db   *sql.DB
		dst  **sql.Stmt
		stmt string
	}{
		{s.w, &s.insert, `INSERT INTO jobs (` + jobColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{s.w, &s.update, `UPDATE jobs SET
		tool = ?, call_id = ?, args = ?, idempotency_key = ?, runner = ?, limits = ?,
		state = ?, reason = ?, result = ?, attempts = ?, started_at = ?, finished_at = ?,
		guard = ?, egress = ?, callback = ?, tags = ?, metadata = ?, cached = ?, hooks = ?
		WHERE id = ?`},
		{s.db, &s.get, `SELECT ` + jobColumns + ` FROM jobs WHERE id = ?`},
	} {
		if *p.dst, err = p.db.PrepareContext(ctx, p.stmt); err != nil {
			return nil, fmt.Errorf("open store %s: prepare: %w", path, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_autocheckpoint=0"); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// A WAL that grew during a burst (a retention pass, a compaction) is
	// cut back to this size when it restarts after a checkpoint.
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf("PRAGMA journal_size_limit=%d", walKeepBytes)); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.group = groupcommit.New(groupcommit.Backend[*sql.Tx]{
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return s.w.BeginTx(ctx, nil) },
		Commit:   func(tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(tx *sql.Tx) error { return tx.Rollback() },
	}, groupMax, groupTimeout)
	s.stopCheckpoint, s.checkpointDone = make(chan struct{}), make(chan struct{})
	go s.checkpointLoop()
	ok = true
	return s, nil
}

// incrementalVacuum puts the database in auto_vacuum=INCREMENTAL mode, so
// that Compact can give free pages back in small steps. A new database
// takes the mode at once; one created before it needs a VACUUM, once.
func incrementalVacuum(ctx context.Context, w *sql.DB) error {
	var mode int
	if err := w.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return fmt.Errorf("auto_vacuum: %w", err)
	}
	if mode == 2 {
		return nil
	}
	if _, err := w.ExecContext(ctx, "PRAGMA auto_vacuum=INCREMENTAL"); err != nil {
		return fmt.Errorf("auto_vacuum: %w", err)
	}
	if _, err := w.ExecContext(ctx, "VACUUM"); err != nil {
		return fmt.Errorf("auto_vacuum: vacuum: %w", err)
	}
	return nil
}

func (s *SQLite) checkpointLoop() {
	defer close(s.checkpointDone)
	t := time.NewTicker(walCheckInterval)
	defer t.Stop()
	var holdOff time.Time // a forced checkpoint that found readers: not again before
	for n := 1; ; n++ {
		select {
		case <-s.stopCheckpoint:
			return
		case <-t.C:
		}
		var size int64
		if fi, err := os.Stat(s.path + "-wal"); err == nil {
			size = fi.Size()
		}
		mayForce := time.Now().After(holdOff)
		if (mayForce && size >= s.walRestart) || n%int(checkpointInterval/walCheckInterval) == 0 {
			if !s.checkpoint(size, mayForce) {
				holdOff = time.Now().Add(restartHoldOff)
			}
		}
	}
}

// walRestartBytes is the WAL size from which a checkpoint that cannot
// finish is forced: under writes without a pause a passive checkpoint
// never catches up (and readers keep the writer from starting the WAL
// over), so the WAL grew with everything written, and the database
// file, which shrinks only when a checkpoint finishes, kept the pages
// retention and compaction gave back. walCheckInterval is how often the
// WAL's size is looked at. A WAL left larger than walKeepBytes is cut
// back to it when the writer starts it over (journal_size_limit), or
// emptied once a passive checkpoint has copied all of it.
const (
	walRestartBytes  = 64 << 20
	walKeepBytes     = 16 << 20
	walCheckInterval = 100 * time.Millisecond
)

// restartWait bounds how long a forced checkpoint waits for the readers
// and the writer (reads and job writes wait for it meanwhile); one that
// could not finish is not tried again for restartHoldOff.
const (
	restartWait    = 250 * time.Millisecond
	restartHoldOff = 500 * time.Millisecond
)

// readConns is the size of the reader pool.
const readConns = 8

// checkpoint copies the WAL (of size bytes) back into the database.
// PASSIVE never waits for readers or the writer; what it cannot copy now
// it copies next time. When mayForce and the WAL reached s.walRestart, or
// the passive one copied all of a WAL above walKeepBytes (which only the
// writer's next commit would cut back, and no write may come), a
// TRUNCATE checkpoint follows, which copies the rest (little: the
// passive one just copied the bulk) and empties the WAL. It runs with every connection held: the readers'
// (readers that overlap without a pause share a read mark the
// checkpoint can never take, and starved it), then the writer's (a
// checkpoint competing for the write lock loses to a busy writer). It
// reports false when a forced checkpoint could not finish.
func (s *SQLite) checkpoint(size int64, mayForce bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var busy, log, done int64
	if err := s.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil || !mayForce {
		return true
	}
	if size < s.walRestart && !(log > 0 && log == done && size > walKeepBytes) {
		return true
	}
	ctx, cancel = context.WithTimeout(context.Background(), restartWait)
	defer cancel()
	held := make([]*sql.Conn, 0, readConns)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range readConns { // each waits for its reader to finish
		c, err := s.db.Conn(ctx)
		if err != nil {
			return false
		}
		held = append(held, c)
	}
	w, err := s.w.Conn(ctx) // waits for the write in progress
	if err != nil {
		return false
	}
	defer w.Close()
	// Another process's reader is waited for no longer than restartWait;
	// the connection goes back with the store's own timeout, or not at all.
	if _, err := w.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout=%d", restartWait.Milliseconds())); err != nil {
		_ = w.Raw(func(any) error { return driver.ErrBadConn })
		return false
	}
	err = w.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &log, &done)
	if _, err := w.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout=%d", busyTimeout.Milliseconds())); err != nil {
		_ = w.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err == nil && busy == 0
}

// Close closes the database. Calls after the first are no-ops.
func (s *SQLite) Close() error {
	if s.group != nil {
		s.group.Close()
	}
	if s.stopCheckpoint != nil {
		select {
		case <-s.stopCheckpoint:
		default:
			close(s.stopCheckpoint)
			<-s.checkpointDone
		}
	}
	var errs []error
	for _, st := range []*sql.Stmt{s.insert, s.update, s.get} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	for _, db := range []*sql.DB{s.db, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

const jobColumns = `id, tenant, tool, call_id, args, idempotency_key, runner, limits,
	state, reason, result, attempts, created_at, started_at, finished_at, session_id,
	guard, egress, callback, tags, metadata, cached, hooks, retry`

// Create implements job.Store.
func (s *SQLite) Create(ctx context.Context, j *job.Job) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	err = s.group.Do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, s.insert).ExecContext(ctx,
			r.id, r.tenant, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
			r.state, r.reason, r.result, r.attempts, r.createdAt, r.startedAt, r.finishedAt, r.sessionID,
			r.guard, r.egress, r.callback, r.tags, r.metadata, r.cached, r.hooks, r.retry)
		return err
	})
	if isConstraint(err) {
		return fmt.Errorf("create job %s: %w: id or idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, sqliteErr(err))
	}
	return nil
}

// Get implements job.Store.
func (s *SQLite) Get(ctx context.Context, id string) (*job.Job, error) {
	j, err := scanJob(s.get.QueryRowContext(ctx, id))
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// GetByIdempotencyKey implements job.Store.
func (s *SQLite) GetByIdempotencyKey(ctx context.Context, tenant, key string) (*job.Job, error) {
	if key == "" {
		return nil, fmt.Errorf("get job by idempotency key: %w", job.ErrNotFound)
	}
	j, err := scanJob(s.db.QueryRowContext(ctx,
		`SELECT `+jobColumns+` FROM jobs WHERE tenant = ? AND idempotency_key = ?`, tenant, key))
	if err != nil {
		return nil, fmt.Errorf("get job by idempotency key: %w", err)
	}
	return j, nil
}

// Update implements job.Store.
func (s *SQLite) Update(ctx context.Context, j *job.Job) error {
	return s.updateWith(ctx, j, nil)
}

// UpdateWithEvents implements job.FinishWriter: the update and the events
// in one transaction (a job's terminal state with its last events, one
// commit where Update and AppendEvents would make two).
func (s *SQLite) UpdateWithEvents(ctx context.Context, j *job.Job, evs []job.EventRecord) error {
	return s.updateWith(ctx, j, evs)
}

func (s *SQLite) updateWith(ctx context.Context, j *job.Job, evs []job.EventRecord) error {
	r, err := toRow(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	var n int64
	err = s.group.Do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.StmtContext(ctx, s.update).ExecContext(ctx,
			r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
			r.state, r.reason, r.result, r.attempts, r.startedAt, r.finishedAt, r.guard, r.egress, r.callback,
			r.tags, r.metadata, r.cached, r.hooks, r.id)
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil || len(evs) == 0 {
			return err
		}
		if n == 0 {
			return job.ErrNotFound // no job: none of its events either
		}
		return insertEvents(ctx, tx, evs)
	})
	if isConstraint(err) {
		return fmt.Errorf("update job %s: %w: idempotency key already used", j.ID, job.ErrConflict)
	}
	if errors.Is(err, job.ErrNotFound) || isForeignKey(err) {
		return fmt.Errorf("update job %s: %w", j.ID, job.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, sqliteErr(err))
	}
	if n == 0 {
		return fmt.Errorf("update job %s: %w", j.ID, job.ErrNotFound)
	}
	return nil
}

// List implements job.Store.
func (s *SQLite) List(ctx context.Context, tenant string, f job.ListFilter) ([]*job.Job, string, error) {
	return listPage(ctx, s.db, page{
		what: "jobs", table: "jobs", columns: jobColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:    [][2]string{{"tool", f.Tool}, {"state", string(f.State)}, {"session_id", f.SessionID}},
		since: f.Since, until: f.Until, labels: f.LabelFilter,
		limit: f.Limit, cursor: f.Cursor,
	}, scanJobs, func(j *job.Job) (time.Time, string) { return j.CreatedAt, j.ID })
}

// ListUnfinished implements job.Store.
func (s *SQLite) ListUnfinished(ctx context.Context) ([]*job.Job, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE state IN ('queued', 'running', 'pending_approval') ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list unfinished jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list unfinished jobs: %w", err)
	}
	return jobs, nil
}

// ListPendingCallbacks implements job.Store.
func (s *SQLite) ListPendingCallbacks(ctx context.Context) ([]*job.Job, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE json_extract(callback, '$.state') = 'pending' AND state IN ('succeeded', 'failed', 'cancelled')
		ORDER BY finished_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list pending callbacks: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list pending callbacks: %w", err)
	}
	return jobs, nil
}

func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// row is a job in column form.
type row struct {
	id, tenant, tool, callID, args string
	idemKey                        sql.NullString
	runner, limits, state, reason  string
	result                         sql.NullString
	attempts                       int
	createdAt                      int64
	startedAt, finishedAt          sql.NullInt64
	sessionID                      string
	guard, egress, callback        sql.NullString
	tags, metadata                 sql.NullString
	cached                         bool
	hooks                          sql.NullString
	retry                          bool
}

func toRow(j *job.Job) (row, error) {
	r := row{
		id: j.ID, tenant: j.Tenant, tool: j.Tool, callID: j.CallID,
		args:    "null",
		idemKey: sql.NullString{String: j.IdempotencyKey, Valid: j.IdempotencyKey != ""},
		runner:  j.Runner, state: string(j.State), reason: j.Reason,
		attempts: j.Attempts, sessionID: j.SessionID,
		createdAt: j.CreatedAt.UnixNano(), cached: j.Cached, retry: j.Retry,
	}
	if len(j.Args) > 0 {
		if !json.Valid(j.Args) {
			return row{}, fmt.Errorf("%w: args are not valid JSON", job.ErrInvalid)
		}
		r.args = string(j.Args)
	}
	b, err := json.Marshal(j.Limits)
	if err != nil {
		return row{}, fmt.Errorf("encode limits: %w", err)
	}
	r.limits = string(b)
	if j.Result != nil {
		b, err := encodeResult(j.Result)
		if err != nil {
			return row{}, fmt.Errorf("encode result: %w", err)
		}
		r.result = sql.NullString{String: string(b), Valid: true}
	}
	if j.Guard != nil {
		b, err := json.Marshal(j.Guard)
		if err != nil {
			return row{}, fmt.Errorf("encode guard: %w", err)
		}
		r.guard = sql.NullString{String: string(b), Valid: true}
	}
	if len(j.Egress) > 0 {
		b, err := json.Marshal(j.Egress)
		if err != nil {
			return row{}, fmt.Errorf("encode egress: %w", err)
		}
		r.egress = sql.NullString{String: string(b), Valid: true}
	}
	if j.Callback != nil {
		b, err := json.Marshal(j.Callback)
		if err != nil {
			return row{}, fmt.Errorf("encode callback: %w", err)
		}
		r.callback = sql.NullString{String: string(b), Valid: true}
	}
	if r.tags, r.metadata, err = encodeLabels(j.Tags, j.Metadata); err != nil {
		return row{}, err
	}
	if len(j.Hooks) > 0 {
		b, err := json.Marshal(j.Hooks)
		if err != nil {
			return row{}, fmt.Errorf("encode hooks: %w", err)
		}
		r.hooks = sql.NullString{String: string(b), Valid: true}
	}
	if j.StartedAt != nil {
		r.startedAt = sql.NullInt64{Int64: j.StartedAt.UnixNano(), Valid: true}
	}
	if j.FinishedAt != nil {
		r.finishedAt = sql.NullInt64{Int64: j.FinishedAt.UnixNano(), Valid: true}
	}
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(sc scanner) (*job.Job, error) {
	var r row
	err := sc.Scan(&r.id, &r.tenant, &r.tool, &r.callID, &r.args, &r.idemKey, &r.runner, &r.limits,
		&r.state, &r.reason, &r.result, &r.attempts, &r.createdAt, &r.startedAt, &r.finishedAt, &r.sessionID,
		&r.guard, &r.egress, &r.callback, &r.tags, &r.metadata, &r.cached, &r.hooks, &r.retry)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, job.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	j := &job.Job{
		ID: r.id, Tenant: r.tenant, Tool: r.tool, CallID: r.callID,
		IdempotencyKey: r.idemKey.String,
		Runner:         r.runner, State: job.State(r.state), Reason: r.reason,
		Attempts: r.attempts, SessionID: r.sessionID, Cached: r.cached, Retry: r.retry,
		CreatedAt: time.Unix(0, r.createdAt).UTC(),
	}
	if r.args != "null" && r.args != "" {
		j.Args = json.RawMessage(r.args)
	}
	if err := json.Unmarshal([]byte(r.limits), &j.Limits); err != nil {
		return nil, fmt.Errorf("decode limits of job %s: %w", r.id, err)
	}
	if r.result.Valid {
		res, err := decodeResult([]byte(r.result.String))
		if err != nil {
			return nil, fmt.Errorf("decode result of job %s: %w", r.id, err)
		}
		j.Result = res
	}
	if r.guard.Valid {
		j.Guard = new(job.GuardRecord)
		if err := json.Unmarshal([]byte(r.guard.String), j.Guard); err != nil {
			return nil, fmt.Errorf("decode guard of job %s: %w", r.id, err)
		}
	}
	if r.egress.Valid {
		if err := json.Unmarshal([]byte(r.egress.String), &j.Egress); err != nil {
			return nil, fmt.Errorf("decode egress of job %s: %w", r.id, err)
		}
	}
	if r.callback.Valid {
		j.Callback = new(job.Callback)
		if err := json.Unmarshal([]byte(r.callback.String), j.Callback); err != nil {
			return nil, fmt.Errorf("decode callback of job %s: %w", r.id, err)
		}
	}
	if j.Tags, j.Metadata, err = decodeLabels(r.tags, r.metadata); err != nil {
		return nil, fmt.Errorf("job %s: %w", r.id, err)
	}
	if r.hooks.Valid {
		if err := json.Unmarshal([]byte(r.hooks.String), &j.Hooks); err != nil {
			return nil, fmt.Errorf("decode hooks of job %s: %w", r.id, err)
		}
	}
	if r.startedAt.Valid {
		t := time.Unix(0, r.startedAt.Int64).UTC()
		j.StartedAt = &t
	}
	if r.finishedAt.Valid {
		t := time.Unix(0, r.finishedAt.Int64).UTC()
		j.FinishedAt = &t
	}
	return j, nil
}

func scanJobs(rows *sql.Rows) ([]*job.Job, error) {
	defer rows.Close()
	var jobs []*job.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}
