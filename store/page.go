package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

// page describes one keyset-paginated, newest-first listing of a tenant's
// rows (jobs, sessions): ordered by (created_at, id) descending, with an
// opaque cursor naming the last row returned.
type page struct {
	what, table, columns string
	tenant               string
	// allTenants drops the tenant filter (the operator's approvals).
	allTenants bool
	// eq are equality filters, column → value; empty values are skipped.
	eq [][2]string
	// since and until bound created_at (since <= created_at < until);
	// zero: no bound.
	since, until time.Time
	// labels are the tags and metadata every row must carry.
	labels job.LabelFilter
	limit  int
	cursor string
}

// listPage runs p and returns up to p.limit rows (default 50, at most 500)
// and the cursor of the next page ("" on the last one).
func listPage[T any](ctx context.Context, db *sql.DB, p page, scan func(*sql.Rows) ([]T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	limit := p.limit
	switch {
	case limit <= 0:
		limit = 50
	case limit > 500:
		limit = 500
	}
	where := []string{"tenant = ?"}
	args := []any{p.tenant}
	if p.allTenants {
		where, args = []string{"1 = 1"}, nil
	}
	for _, f := range p.eq {
		if f[1] != "" {
			where = append(where, f[0]+" = ?")
			args = append(args, f[1])
		}
	}
	if !p.since.IsZero() {
		where = append(where, "created_at >= ?")
		args = append(args, p.since.UnixNano())
	}
	if !p.until.IsZero() {
		where = append(where, "created_at < ?")
		args = append(args, p.until.UnixNano())
	}
	lw, la := labelWhere(p.labels)
	where, args = append(where, lw...), append(args, la...)
	if p.cursor != "" {
		ts, id, err := decodeCursor(p.cursor)
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", p.what, err)
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, ts, ts, id)
	}
	args = append(args, limit+1)
	rows, err := db.QueryContext(ctx, `SELECT `+p.columns+` FROM `+p.table+` WHERE `+
		strings.Join(where, " AND ")+` ORDER BY created_at DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", p.what, err)
	}
	out, err := scan(rows)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", p.what, err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		created, id := key(out[limit-1])
		next = encodeCursor(created.UnixNano(), id)
	}
	return out, next, nil
}
