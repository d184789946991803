package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// Turn batches (job.BatchRecord): one row in batches with the calls as
// JSON, and one row per reserved job in batch_jobs, which retention joins
// with jobs to delete a batch once none of its jobs is left.

const batchColumns = `id, tenant, idempotency_key, session_id, state, created_at, finished_at, record`

// batchData is the JSON of a batch's record column.
type batchData struct {
	Dialect     tools.Dialect     `json:"dialect"`
	Mode        string            `json:"mode,omitempty"`
	Calls       []job.BatchCall   `json:"calls"`
	FinalAnswer string            `json:"final_answer,omitempty"`
	HasFinal    bool              `json:"has_final_answer,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Callback    *job.Callback     `json:"callback,omitempty"`
}

// batchRow is a batch in column form.
type batchRow struct {
	id, tenant string
	idemKey    sql.NullString
	sessionID  string
	state      string
	createdAt  int64
	finishedAt sql.NullInt64
	record     string
}

func toBatchRow(b *job.BatchRecord) (batchRow, error) {
	rec, err := json.Marshal(batchData{Dialect: b.Dialect, Mode: b.Mode, Calls: b.Calls,
		FinalAnswer: b.FinalAnswer, HasFinal: b.HasFinal, Tags: b.Tags, Metadata: b.Metadata, Callback: b.Callback})
	if err != nil {
		return batchRow{}, err
	}
	r := batchRow{id: b.ID, tenant: b.Tenant, sessionID: b.SessionID, state: string(b.State),
		createdAt: b.CreatedAt.UnixNano(), finishedAt: nullTime(b.FinishedAt), record: string(rec)}
	if b.IdempotencyKey != "" {
		r.idemKey = sql.NullString{String: b.IdempotencyKey, Valid: true}
	}
	return r, nil
}

func scanBatch(sc scanner) (*job.BatchRecord, error) {
	var r batchRow
	err := sc.Scan(&r.id, &r.tenant, &r.idemKey, &r.sessionID, &r.state, &r.createdAt, &r.finishedAt, &r.record)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, job.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var d batchData
	if err := json.Unmarshal([]byte(r.record), &d); err != nil {
		return nil, fmt.Errorf("decode batch %s: %w", r.id, err)
	}
	b := &job.BatchRecord{ID: r.id, Tenant: r.tenant, IdempotencyKey: r.idemKey.String, SessionID: r.sessionID,
		Dialect: d.Dialect, Mode: d.Mode, State: job.BatchState(r.state), CreatedAt: time.Unix(0, r.createdAt).UTC(),
		Calls: d.Calls, FinalAnswer: d.FinalAnswer, HasFinal: d.HasFinal, Tags: d.Tags, Metadata: d.Metadata,
		Callback: d.Callback}
	if r.finishedAt.Valid {
		t := time.Unix(0, r.finishedAt.Int64).UTC()
		b.FinishedAt = &t
	}
	return b, nil
}

// CreateBatch implements job.Store: the batch and its job IDs in one
// transaction (committed with the jobs written at the same moment).
func (s *SQLite) CreateBatch(ctx context.Context, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	err = s.group.Do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO batches (`+batchColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.id, r.tenant, r.idemKey, r.sessionID, r.state, r.createdAt, r.finishedAt, r.record); err != nil {
			return err
		}
		return sqliteBatchJobs(ctx, tx, b)
	})
	if isConstraint(err) {
		return fmt.Errorf("create batch %s: %w: id or idempotency key already used", b.ID, job.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create batch %s: %w", b.ID, sqliteErr(err))
	}
	return nil
}

// sqliteBatchJobs records b's job IDs. The ones it had are kept (a call
// whose reserved ID was replaced by its key's job, or answered without a
// job): retention joins them with jobs, where such an ID has no row, so
// they never hold a batch back, and an update of a batch whose IDs did not
// change (every completion) writes nothing here.
func sqliteBatchJobs(ctx context.Context, tx *sql.Tx, b *job.BatchRecord) error {
	ids := b.JobIDs()
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		args = append(args, b.ID, id)
	}
	_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO batch_jobs (batch_id, job_id) VALUES (?, ?)`+
		strings.Repeat(", (?, ?)", len(ids)-1), args...)
	return err
}

// GetBatch implements job.Store.
func (s *SQLite) GetBatch(ctx context.Context, id string) (*job.BatchRecord, error) {
	b, err := scanBatch(s.db.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("get batch %s: %w", id, err)
	}
	return b, nil
}

// GetBatchByIdempotencyKey implements job.Store.
func (s *SQLite) GetBatchByIdempotencyKey(ctx context.Context, tenant, key string) (*job.BatchRecord, error) {
	if key == "" {
		return nil, fmt.Errorf("get batch by idempotency key: %w", job.ErrNotFound)
	}
	b, err := scanBatch(s.db.QueryRowContext(ctx,
		`SELECT `+batchColumns+` FROM batches WHERE tenant = ? AND idempotency_key = ?`, tenant, key))
	if err != nil {
		return nil, fmt.Errorf("get batch by idempotency key: %w", err)
	}
	return b, nil
}

// UpdateBatch implements job.Store.
func (s *SQLite) UpdateBatch(ctx context.Context, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("update batch %s: %w", b.ID, err)
	}
	var n int64
	err = s.group.Do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE batches SET state = ?, finished_at = ?, record = ? WHERE id = ?`,
			r.state, r.finishedAt, r.record, r.id)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		return sqliteBatchJobs(ctx, tx, b)
	})
	if err != nil {
		return fmt.Errorf("update batch %s: %w", b.ID, sqliteErr(err))
	}
	if n == 0 {
		return fmt.Errorf("update batch %s: %w", b.ID, job.ErrNotFound)
	}
	return nil
}

// ListUnfinishedBatches implements job.Store.
func (s *SQLite) ListUnfinishedBatches(ctx context.Context) ([]*job.BatchRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+batchColumns+` FROM batches
		WHERE state != 'completed' ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list unfinished batches: %w", err)
	}
	defer rows.Close()
	var out []*job.BatchRecord
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, fmt.Errorf("list unfinished batches: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unfinished batches: %w", err)
	}
	return out, nil
}

// deadBatchesQuery selects completed batches finished before the first
// argument none of whose jobs is left, the earliest finished first, at
// most the second; with the bytes their records hold.
const deadBatchesQuery = `SELECT b.id, LENGTH(b.record) FROM batches b
	WHERE b.state = 'completed' AND b.finished_at < ? AND NOT EXISTS (
		SELECT 1 FROM batch_jobs bj JOIN jobs j ON j.id = bj.job_id WHERE bj.batch_id = b.id)
	ORDER BY b.finished_at LIMIT ?`

// deleteDeadBatches is DeleteFinishedJobs's part for batches, in its
// transaction tx (after the jobs went).
func (s *SQLite) deleteDeadBatches(ctx context.Context, tx *sql.Tx, before time.Time, limit int) (n int, bytes int64, err error) {
	rows, err := tx.QueryContext(ctx, deadBatchesQuery, before.UnixNano(), limit)
	if err != nil {
		return 0, 0, err
	}
	var ids []any
	for rows.Next() {
		var id string
		var size int64
		if err := rows.Scan(&id, &size); err != nil {
			rows.Close()
			return 0, 0, err
		}
		ids = append(ids, id)
		bytes += size
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	in := "(?" + strings.Repeat(", ?", len(ids)-1) + ")"
	if _, err := tx.ExecContext(ctx, `DELETE FROM batch_jobs WHERE batch_id IN `+in, ids...); err != nil {
		return 0, 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM batches WHERE id IN `+in, ids...); err != nil {
		return 0, 0, err
	}
	return len(ids), bytes, nil
}

// CreateBatch implements job.Store.
func (s *Postgres) CreateBatch(ctx context.Context, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batches (`+batchColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			r.id, r.tenant, r.idemKey, r.sessionID, r.state, r.createdAt, r.finishedAt, r.record); err != nil {
			return err
		}
		return pgBatchJobs(ctx, tx, b)
	})
	if pgUnique(err) {
		return fmt.Errorf("create batch %s: %w: id or idempotency key already used", b.ID, job.ErrConflict)
	}
	return pgErr("create batch "+b.ID, err)
}

// pgBatchJobs records b's job IDs, keeping the ones it had
// (sqliteBatchJobs says why that is harmless).
func pgBatchJobs(ctx context.Context, tx pgx.Tx, b *job.BatchRecord) error {
	ids := b.JobIDs()
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO batch_jobs (batch_id, job_id)
		SELECT $1, j FROM unnest($2::text[]) AS j ON CONFLICT DO NOTHING`, b.ID, ids)
	return err
}

// GetBatch implements job.Store.
func (s *Postgres) GetBatch(ctx context.Context, id string) (*job.BatchRecord, error) {
	b, err := scanBatch(pgRow{s.pool.QueryRow(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = $1`, id)})
	if err != nil {
		return nil, pgErr("get batch "+id, err)
	}
	return b, nil
}

// GetBatchByIdempotencyKey implements job.Store.
func (s *Postgres) GetBatchByIdempotencyKey(ctx context.Context, tenant, key string) (*job.BatchRecord, error) {
	if key == "" {
		return nil, fmt.Errorf("get batch by idempotency key: %w", job.ErrNotFound)
	}
	b, err := scanBatch(pgRow{s.pool.QueryRow(ctx,
		`SELECT `+batchColumns+` FROM batches WHERE tenant = $1 AND idempotency_key = $2`, tenant, key)})
	if err != nil {
		return nil, pgErr("get batch by idempotency key", err)
	}
	return b, nil
}

// UpdateBatch implements job.Store.
func (s *Postgres) UpdateBatch(ctx context.Context, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("update batch %s: %w", b.ID, err)
	}
	found := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE batches SET state = $1, finished_at = $2, record = $3 WHERE id = $4`,
			r.state, r.finishedAt, r.record, r.id)
		if err != nil {
			return err
		}
		if found = tag.RowsAffected() > 0; !found {
			return nil
		}
		return pgBatchJobs(ctx, tx, b)
	})
	if err != nil {
		return pgErr("update batch "+b.ID, err)
	}
	if !found {
		return fmt.Errorf("update batch %s: %w", b.ID, job.ErrNotFound)
	}
	return nil
}

// CreateBatchOwned implements job.Coordinator: CreateBatch recording l
// as the batch's owner, only while l is live (else ErrLeaseLost).
func (s *Postgres) CreateBatchOwned(ctx context.Context, l Lease, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	live := true
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO batches (`+batchColumns+`, owner, owner_epoch)
			SELECT $3::text, $4::text, $5::text, $6::text, $7::text, $8::bigint, $9::bigint, $10::text, $1::text, $2::bigint
			WHERE `+validLease,
			l.Replica, l.Epoch, r.id, r.tenant, r.idemKey, r.sessionID, r.state, r.createdAt, r.finishedAt, r.record)
		if err != nil {
			return err
		}
		if live = tag.RowsAffected() > 0; !live {
			return nil
		}
		return pgBatchJobs(ctx, tx, b)
	})
	if pgUnique(err) {
		return fmt.Errorf("create batch %s: %w: id or idempotency key already used", b.ID, job.ErrConflict)
	}
	if err != nil {
		return pgErr("create batch "+b.ID, err)
	}
	if !live {
		return fmt.Errorf("create batch %s by %s epoch %d: %w", b.ID, l.Replica, l.Epoch, ErrLeaseLost)
	}
	return nil
}

// UpdateBatchFenced implements job.Coordinator: UpdateBatch while l is
// live and the batch is l's (or no replica's); otherwise ErrFenced and
// nothing changes.
func (s *Postgres) UpdateBatchFenced(ctx context.Context, l Lease, b *job.BatchRecord) error {
	r, err := toBatchRow(b)
	if err != nil {
		return fmt.Errorf("update batch %s: %w", b.ID, err)
	}
	found := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE batches SET state = $3, finished_at = $4, record = $5
			WHERE id = $6 AND ((owner = $1 AND owner_epoch = $2) OR owner = '') AND `+validLease,
			l.Replica, l.Epoch, r.state, r.finishedAt, r.record, r.id)
		if err != nil {
			return err
		}
		if found = tag.RowsAffected() > 0; !found {
			return nil
		}
		return pgBatchJobs(ctx, tx, b)
	})
	if err != nil {
		return pgErr("update batch "+b.ID, err)
	}
	if !found {
		if _, err := s.GetBatch(ctx, b.ID); err != nil {
			return fmt.Errorf("update batch %s: %w", b.ID, err)
		}
		return fmt.Errorf("update batch %s by %s epoch %d: %w", b.ID, l.Replica, l.Epoch, ErrFenced)
	}
	return nil
}

// ListUnfinishedBatches implements job.Store.
func (s *Postgres) ListUnfinishedBatches(ctx context.Context) ([]*job.BatchRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+batchColumns+` FROM batches
		WHERE state != 'completed' ORDER BY created_at, id`)
	out, err := collect(rows, err, scanBatch)
	return out, pgErr("list unfinished batches", err)
}

// pgDeleteDeadBatches is DeleteFinishedJobs's part for batches, in its
// transaction tx (their batch_jobs rows go by ON DELETE CASCADE).
func pgDeleteDeadBatches(ctx context.Context, tx pgx.Tx, before time.Time, limit int) (n int, bytes int64, err error) {
	rows, err := tx.Query(ctx, `SELECT b.id, OCTET_LENGTH(b.record) FROM batches b
		WHERE b.state = 'completed' AND b.finished_at < $1 AND NOT EXISTS (
			SELECT 1 FROM batch_jobs bj JOIN jobs j ON j.id = bj.job_id WHERE bj.batch_id = b.id)
		ORDER BY b.finished_at LIMIT $2 FOR UPDATE OF b SKIP LOCKED`, before.UnixNano(), limit)
	type rec struct {
		id string
		n  int64
	}
	recs, err := collect(rows, err, func(sc scanner) (rec, error) {
		var r rec
		return r, sc.Scan(&r.id, &r.n)
	})
	if err != nil || len(recs) == 0 {
		return 0, 0, err
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.id
		bytes += r.n
	}
	if _, err := tx.Exec(ctx, `DELETE FROM batches WHERE id = ANY($1)`, ids); err != nil {
		return 0, 0, err
	}
	return len(ids), bytes, nil
}
