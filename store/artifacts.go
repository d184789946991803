package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// Artifacts live in a table of their own rather than in files under the
// data dir: they are written and deleted in the same database as their job
// (retention removes both in one transaction, a crash leaves no orphan
// file), the same backup covers them, and a shared store (Postgres) serves
// them to every replica. A cell's artifacts are bounded (a few MiB), well
// within what a BLOB handles.

// PutArtifact implements job.Store.
func (s *SQLite) PutArtifact(ctx context.Context, jobID string, a tools.Artifact) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO artifacts (job_id, name, mime_type, size, data)
		VALUES (?, ?, ?, ?, ?)`, jobID, a.Name, a.MimeType, int64(len(a.Data)), nonNil(a.Data))
	switch {
	case isForeignKey(err):
		return fmt.Errorf("put artifact %s of job %s: %w", a.Name, jobID, job.ErrNotFound)
	case isConstraint(err):
		return fmt.Errorf("put artifact %s of job %s: %w: name already used", a.Name, jobID, job.ErrConflict)
	case err != nil:
		return fmt.Errorf("put artifact %s of job %s: %w", a.Name, jobID, sqliteErr(err))
	}
	return nil
}

// GetArtifact implements job.Store.
func (s *SQLite) GetArtifact(ctx context.Context, jobID, name string) (*tools.Artifact, error) {
	a := &tools.Artifact{Name: name}
	err := s.db.QueryRowContext(ctx, `SELECT mime_type, size, data FROM artifacts WHERE job_id = ? AND name = ?`,
		jobID, name).Scan(&a.MimeType, &a.Size, &a.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get artifact %s of job %s: %w", name, jobID, job.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get artifact %s of job %s: %w", name, jobID, err)
	}
	return a, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
