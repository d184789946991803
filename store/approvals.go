package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
)

const approvalColumns = `id, tenant, job_id, session_id, tool, args, effects, rule, reason, state,
	created_at, expires_at, decided_at, decision_reason`

// CreateApproval implements job.Store.
func (s *SQLite) CreateApproval(ctx context.Context, a *job.Approval) error {
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
	_, err = s.w.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Tenant, a.JobID, a.SessionID, a.Tool, args, string(eff), a.Rule, a.Reason, string(a.State),
		a.CreatedAt.UnixNano(), a.ExpiresAt.UnixNano(), nullTime(a.DecidedAt), a.DecisionReason)
	if isConstraint(err) {
		return fmt.Errorf("create approval %s: %w: id or job already has one", a.ID, job.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create approval %s: %w", a.ID, sqliteErr(err))
	}
	return nil
}

// GetApproval implements job.Store.
func (s *SQLite) GetApproval(ctx context.Context, id string) (*job.Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("get approval %s: %w", id, err)
	}
	return a, nil
}

// DecideApproval implements job.Store: the update only applies to a row
// still pending, so two deciders (or a decider and the expiry) cannot both
// win.
func (s *SQLite) DecideApproval(ctx context.Context, a *job.Approval) error {
	res, err := s.w.ExecContext(ctx, `UPDATE approvals SET state = ?, decided_at = ?, decision_reason = ?
		WHERE id = ? AND state = 'pending'`, string(a.State), nullTime(a.DecidedAt), a.DecisionReason, a.ID)
	if err != nil {
		return fmt.Errorf("decide approval %s: %w", a.ID, sqliteErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("decide approval %s: %w", a.ID, err)
	}
	if n == 0 {
		if _, gerr := s.GetApproval(ctx, a.ID); gerr != nil {
			return fmt.Errorf("decide approval %s: %w", a.ID, gerr)
		}
		return fmt.Errorf("decide approval %s: %w: it is no longer pending", a.ID, job.ErrConflict)
	}
	return nil
}

// ListApprovals implements job.Store.
func (s *SQLite) ListApprovals(ctx context.Context, tenant string, f job.ApprovalFilter) ([]*job.Approval, string, error) {
	return listPage(ctx, s.db, page{
		what: "approvals", table: "approvals", columns: approvalColumns, tenant: tenant, allTenants: tenant == job.AllTenants,
		eq:    [][2]string{{"state", string(f.State)}},
		limit: f.Limit, cursor: f.Cursor,
	}, scanApprovals, func(a *job.Approval) (time.Time, string) { return a.CreatedAt, a.ID })
}

// ListPendingApprovals implements job.Store.
func (s *SQLite) ListPendingApprovals(ctx context.Context) ([]*job.Approval, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE state = 'pending' ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	out, err := scanApprovals(rows)
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	return out, nil
}

// ListSpends implements job.Store.
func (s *SQLite) ListSpends(ctx context.Context, since time.Time) ([]policy.Spend, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, guard FROM jobs
		WHERE guard IS NOT NULL AND created_at >= ?`, since.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list spends: %w", err)
	}
	defer rows.Close()
	var out []policy.Spend
	for rows.Next() {
		var id, raw string
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("list spends: %w", err)
		}
		var g job.GuardRecord
		if err := json.Unmarshal([]byte(raw), &g); err != nil {
			return nil, fmt.Errorf("list spends: decode guard of job %s: %w", id, err)
		}
		if !g.Refunded {
			out = append(out, g.Spend...)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list spends: %w", err)
	}
	return out, nil
}

func scanApproval(sc scanner) (*job.Approval, error) {
	var (
		a                job.Approval
		args, eff, state string
		created, expires int64
		decided          sql.NullInt64
	)
	err := sc.Scan(&a.ID, &a.Tenant, &a.JobID, &a.SessionID, &a.Tool, &args, &eff, &a.Rule, &a.Reason, &state,
		&created, &expires, &decided, &a.DecisionReason)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, job.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if args != "null" && args != "" {
		a.Arguments = json.RawMessage(args)
	}
	if err := json.Unmarshal([]byte(eff), &a.Effects); err != nil {
		return nil, fmt.Errorf("decode effects of approval %s: %w", a.ID, err)
	}
	a.State = job.ApprovalState(state)
	a.CreatedAt = time.Unix(0, created).UTC()
	a.ExpiresAt = time.Unix(0, expires).UTC()
	if decided.Valid {
		t := time.Unix(0, decided.Int64).UTC()
		a.DecidedAt = &t
	}
	return &a, nil
}

func scanApprovals(rows *sql.Rows) ([]*job.Approval, error) {
	defer rows.Close()
	var out []*job.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
