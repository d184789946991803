package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
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

// sql returns the page's query (placeholders ? or, with dollar, $1, $2,
// ...), its arguments and the effective limit (default 50, at most 500).
// The query asks for limit+1 rows: one more means another page.
func (p page) sql(dollar bool) (query string, args []any, limit int, err error) {
	limit = p.limit
	switch {
	case limit <= 0:
		limit = 50
	case limit > 500:
		limit = 500
	}
	ph := func() string {
		if !dollar {
			return "?"
		}
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	add := func(format string, vs ...any) {
		parts := strings.Split(format, "?")
		var b strings.Builder
		for i, part := range parts {
			b.WriteString(part)
			if i < len(vs) {
				args = append(args, vs[i])
				b.WriteString(ph())
			}
		}
		where = append(where, b.String())
	}
	if p.allTenants {
		where = append(where, "1 = 1")
	} else {
		add("tenant = ?", p.tenant)
	}
	for _, f := range p.eq {
		if f[1] != "" {
			add(f[0]+" = ?", f[1])
		}
	}
	if !p.since.IsZero() {
		add("created_at >= ?", p.since.UnixNano())
	}
	if !p.until.IsZero() {
		add("created_at < ?", p.until.UnixNano())
	}
	lw, la := labelWhere(p.labels, dollar)
	for _, w := range lw {
		n := strings.Count(w, "?")
		add(w, la[:n]...)
		la = la[n:]
	}
	if p.cursor != "" {
		ts, id, err := decodeCursor(p.cursor)
		if err != nil {
			return "", nil, 0, fmt.Errorf("list %s: %w", p.what, err)
		}
		add("(created_at < ? OR (created_at = ? AND id < ?))", ts, ts, id)
	}
	args = append(args, limit+1)
	query = `SELECT ` + p.columns + ` FROM ` + p.table + ` WHERE ` +
		strings.Join(where, " AND ") + ` ORDER BY created_at DESC, id DESC LIMIT ` + ph()
	return query, args, limit, nil
}

// nextPage trims out to limit rows and returns the cursor of the next
// page ("" on the last one).
func nextPage[T any](out []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(out) <= limit {
		return out, ""
	}
	out = out[:limit]
	created, id := key(out[limit-1])
	return out, encodeCursor(created.UnixNano(), id)
}

// listPage runs p and returns up to p.limit rows (default 50, at most 500)
// and the cursor of the next page ("" on the last one).
func listPage[T any](ctx context.Context, db *sql.DB, p page, scan func(*sql.Rows) ([]T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	query, args, limit, err := p.sql(false)
	if err != nil {
		return nil, "", err
	}
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", p.what, err)
	}
	out, err := scan(rows)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", p.what, err)
	}
	out, next := nextPage(out, limit, key)
	return out, next, nil
}
