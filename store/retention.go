package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

const (
	// compactStep is how many free pages one incremental vacuum step
	// returns (1 MiB of 4 KiB pages): each step is a short write, so the
	// job writer waits at most one step.
	compactStep = 256
	// compactMinBytes: below this much free space compaction is not
	// worth a write.
	compactMinBytes = 4 << 20
)

// DeleteFinishedJobs implements job.Store. One transaction deletes the
// batch: the jobs' events, artifacts and approvals, then the jobs.
func (s *SQLite) DeleteFinishedJobs(ctx context.Context, before, keepGuardedSince time.Time, limit int) (d job.Deleted, err error) {
	if limit <= 0 {
		limit = 100
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return d, fmt.Errorf("delete finished jobs: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			d = job.Deleted{}
		}
	}()
	rows, err := tx.QueryContext(ctx, `SELECT id, LENGTH(CAST(args AS BLOB)) + IFNULL(LENGTH(CAST(result AS BLOB)), 0)
			+ IFNULL(LENGTH(CAST(guard AS BLOB)), 0) + IFNULL(LENGTH(CAST(egress AS BLOB)), 0)
		FROM jobs
		WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at < ?
			AND NOT (guard IS NOT NULL AND created_at >= ?)
		ORDER BY finished_at LIMIT ?`, before.UnixNano(), keepGuardedSince.UnixNano(), limit)
	if err != nil {
		return d, fmt.Errorf("delete finished jobs: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return d, fmt.Errorf("delete finished jobs: %w", err)
		}
		ids = append(ids, id)
		d.Bytes += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("delete finished jobs: %w", err)
	}
	if len(ids) > 0 {
		if err := deleteJobs(ctx, tx, ids, &d); err != nil {
			return d, err
		}
	}
	nb, bytes, err := s.deleteDeadBatches(ctx, tx, before, limit)
	if err != nil {
		return d, fmt.Errorf("delete finished jobs: batches: %w", err)
	}
	if len(ids) == 0 && nb == 0 {
		return d, tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return d, fmt.Errorf("delete finished jobs: %w", err)
	}
	d.Batches, d.Bytes = nb, d.Bytes+bytes
	return d, nil
}

// deleteJobs deletes the jobs ids with their events, artifacts and
// approvals in tx, adding what they held to d.
func deleteJobs(ctx context.Context, tx *sql.Tx, ids []any, d *job.Deleted) error {
	in := "(?" + strings.Repeat(", ?", len(ids)-1) + ")"
	var ev, art int64
	if err := tx.QueryRowContext(ctx, `SELECT IFNULL(SUM(LENGTH(data)), 0) FROM job_events WHERE job_id IN `+in, ids...).Scan(&ev); err != nil {
		return fmt.Errorf("delete finished jobs: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT IFNULL(SUM(size), 0) FROM artifacts WHERE job_id IN `+in, ids...).Scan(&art); err != nil {
		return fmt.Errorf("delete finished jobs: %w", err)
	}
	for _, table := range []string{"job_events", "artifacts", "approvals"} {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE job_id IN `+in, ids...); err != nil {
			return fmt.Errorf("delete finished jobs: %s: %w", table, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id IN `+in, ids...); err != nil {
		return fmt.Errorf("delete finished jobs: %w", err)
	}
	d.Jobs, d.Bytes = len(ids), d.Bytes+ev+art
	return nil
}

// pages reads the database's page size, page count and free pages.
func (s *SQLite) pages(ctx context.Context) (size, count, free int64, err error) {
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"page_size", &size}, {"page_count", &count}, {"freelist_count", &free}} {
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+p.name).Scan(p.dst); err != nil {
			return 0, 0, 0, fmt.Errorf("pragma %s: %w", p.name, err)
		}
	}
	return size, count, free, nil
}

// Size implements job.Store: pages in use for Bytes; the database file
// and its WAL for FileBytes.
func (s *SQLite) Size(ctx context.Context) (job.StoreSize, error) {
	size, count, free, err := s.pages(ctx)
	if err != nil {
		return job.StoreSize{}, fmt.Errorf("store size: %w", err)
	}
	out := job.StoreSize{Bytes: (count - free) * size}
	for _, p := range []string{s.path, s.path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			out.FileBytes += fi.Size()
		}
	}
	return out, nil
}

// Compact implements job.Store with incremental vacuum (the database is
// in auto_vacuum=INCREMENTAL mode, see Open), compactStep pages per
// write, when at least compactMinBytes are free. The file shrinks at the
// next checkpoint.
func (s *SQLite) Compact(ctx context.Context) (int64, error) {
	size, _, free, err := s.pages(ctx)
	if err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	if free*size < compactMinBytes {
		return 0, nil
	}
	start := free
	for free > 0 && ctx.Err() == nil {
		if _, err := s.w.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", compactStep)); err != nil {
			return (start - free) * size, fmt.Errorf("compact: %w", err)
		}
		next := free
		if err := s.w.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&next); err != nil {
			return (start - free) * size, fmt.Errorf("compact: %w", err)
		}
		if next >= free { // nothing more to give back
			free = next
			break
		}
		free = next
	}
	return (start - free) * size, nil
}
