package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sandboxd/sandboxd/job"
)

// maxEventsPerInsert bounds the rows of one INSERT statement (5 values
// each, well under SQLite's 32766 bound variables).
const maxEventsPerInsert = 200

// AppendEvents implements job.Store: the whole batch goes into one
// transaction, shared with the job writes queued meanwhile (group commit),
// as multi-row INSERTs of up to maxEventsPerInsert events each.
func (s *SQLite) AppendEvents(ctx context.Context, evs []job.EventRecord) error {
	if len(evs) == 0 {
		return nil
	}
	err := s.group.Do(ctx, func(ctx context.Context, tx *sql.Tx) error { return insertEvents(ctx, tx, evs) })
	if isForeignKey(err) {
		return fmt.Errorf("append events: %w: no such job", job.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("append events: %w", sqliteErr(err))
	}
	return nil
}

// insertEvents writes evs in tx as multi-row INSERTs of up to
// maxEventsPerInsert events each; an event already recorded is kept.
func insertEvents(ctx context.Context, tx *sql.Tx, evs []job.EventRecord) error {
	for rest := evs; len(rest) > 0; {
		n := min(len(rest), maxEventsPerInsert)
		var q strings.Builder
		q.WriteString(`INSERT INTO job_events (job_id, seq, type, time, data) VALUES `)
		args := make([]any, 0, 5*n)
		for i, ev := range rest[:n] {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			args = append(args, ev.JobID, ev.Seq, string(ev.Type), ev.Time.UnixNano(), []byte(ev.Data))
		}
		q.WriteString(` ON CONFLICT (job_id, seq) DO NOTHING`)
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// ListEvents implements job.Store.
func (s *SQLite) ListEvents(ctx context.Context, jobID string, after, limit int) ([]job.EventRecord, error) {
	switch {
	case limit <= 0:
		limit = 256
	case limit > 1000:
		limit = 1000
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, type, time, data FROM job_events
		WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?`, jobID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of job %s: %w", jobID, err)
	}
	defer rows.Close()
	var out []job.EventRecord
	for rows.Next() {
		var (
			ev   = job.EventRecord{JobID: jobID}
			typ  string
			ts   int64
			data []byte
		)
		if err := rows.Scan(&ev.Seq, &typ, &ts, &data); err != nil {
			return nil, fmt.Errorf("list events of job %s: %w", jobID, err)
		}
		ev.Type, ev.Time, ev.Data = job.EventType(typ), time.Unix(0, ts).UTC(), string(data)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of job %s: %w", jobID, err)
	}
	return out, nil
}

func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// sqliteErr marks a write SQLite could not take: the database or disk is
// full as job.ErrHostDiskFull (the API's 503 disk_full), and that or a
// file that cannot be written or opened as job.ErrStoreUnavailable; the
// transaction left nothing behind. Other errors are returned as they are.
func sqliteErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("%w: %w: %w", job.ErrHostDiskFull, job.ErrStoreUnavailable, err)
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("%w: %w", job.ErrStoreUnavailable, err)
		}
	}
	return err
}
