package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

const sessionColumns = `id, tenant, image, effects, limits, state, reason, ttl, idle_timeout,
	created_at, expires_at, last_used_at, closed_at, tags, metadata`

// CreateSession implements job.Store.
func (s *SQLite) CreateSession(ctx context.Context, ss *job.Session) error {
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
	_, err = s.w.ExecContext(ctx, `INSERT INTO sessions (`+sessionColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ss.ID, ss.Tenant, ss.Image, string(eff), string(lim), string(ss.State), ss.Reason,
		int64(ss.TTL), int64(ss.IdleTimeout), ss.CreatedAt.UnixNano(), ss.ExpiresAt.UnixNano(),
		ss.LastUsedAt.UnixNano(), nullTime(ss.ClosedAt), tags, md)
	if isConstraint(err) {
		return fmt.Errorf("create session %s: %w: id already used", ss.ID, job.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create session %s: %w", ss.ID, sqliteErr(err))
	}
	return nil
}

// GetSession implements job.Store.
func (s *SQLite) GetSession(ctx context.Context, id string) (*job.Session, error) {
	ss, err := scanSession(s.db.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	return ss, nil
}

// UpdateSession implements job.Store.
func (s *SQLite) UpdateSession(ctx context.Context, ss *job.Session) error {
	res, err := s.w.ExecContext(ctx, `UPDATE sessions SET state = ?, reason = ?, last_used_at = ?, closed_at = ?
		WHERE id = ?`, string(ss.State), ss.Reason, ss.LastUsedAt.UnixNano(), nullTime(ss.ClosedAt), ss.ID)
	if err != nil {
		return fmt.Errorf("update session %s: %w", ss.ID, sqliteErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update session %s: %w", ss.ID, err)
	} else if n == 0 {
		return fmt.Errorf("update session %s: %w", ss.ID, job.ErrNotFound)
	}
	return nil
}

// ListSessions implements job.Store.
func (s *SQLite) ListSessions(ctx context.Context, tenant string, f job.SessionFilter) ([]*job.Session, string, error) {
	return listPage(ctx, s.db, page{
		what: "sessions", table: "sessions", columns: sessionColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:     [][2]string{{"state", string(f.State)}},
		labels: f.LabelFilter,
		limit:  f.Limit, cursor: f.Cursor,
	}, scanSessions, func(x *job.Session) (time.Time, string) { return x.CreatedAt, x.ID })
}

// ListOpenSessions implements job.Store.
func (s *SQLite) ListOpenSessions(ctx context.Context) ([]*job.Session, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE state IN ('creating', 'active') ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list open sessions: %w", err)
	}
	out, err := scanSessions(rows)
	if err != nil {
		return nil, fmt.Errorf("list open sessions: %w", err)
	}
	return out, nil
}

func nullTime(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func scanSession(sc scanner) (*job.Session, error) {
	var (
		ss                           job.Session
		eff, lim, state              string
		ttl, idle, created, exp, use int64
		closed                       sql.NullInt64
		tags, md                     sql.NullString
	)
	err := sc.Scan(&ss.ID, &ss.Tenant, &ss.Image, &eff, &lim, &state, &ss.Reason, &ttl, &idle,
		&created, &exp, &use, &closed, &tags, &md)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, job.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(eff), &ss.Effects); err != nil {
		return nil, fmt.Errorf("decode effects of session %s: %w", ss.ID, err)
	}
	if err := json.Unmarshal([]byte(lim), &ss.Limits); err != nil {
		return nil, fmt.Errorf("decode limits of session %s: %w", ss.ID, err)
	}
	if ss.Tags, ss.Metadata, err = decodeLabels(tags, md); err != nil {
		return nil, fmt.Errorf("session %s: %w", ss.ID, err)
	}
	ss.State = job.SessionState(state)
	ss.TTL, ss.IdleTimeout = time.Duration(ttl), time.Duration(idle)
	ss.CreatedAt = time.Unix(0, created).UTC()
	ss.ExpiresAt = time.Unix(0, exp).UTC()
	ss.LastUsedAt = time.Unix(0, use).UTC()
	if closed.Valid {
		t := time.Unix(0, closed.Int64).UTC()
		ss.ClosedAt = &t
	}
	return &ss, nil
}

func scanSessions(rows *sql.Rows) ([]*job.Session, error) {
	defer rows.Close()
	var out []*job.Session
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}
