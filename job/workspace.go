package job

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner"
)

// Workspaces of sandboxes are made by Config.Workspaces (one home:
// internal/workspace), here for one-shot jobs (oneShotSandbox), pooled
// sandboxes (pool.create) and sessions (createSessionSandbox), each bounded
// by its limits' DiskBytes and DiskInodes. A sandbox without a workspace
// (WorkspaceNone) of a one-shot job gets none; a session always has one
// (uploads go there whatever its sandbox sees).

// diskLimits are the workspace bounds of l.
func diskLimits(l runner.Limits) workspace.Limits {
	return workspace.Limits{Bytes: l.DiskBytes, Inodes: l.DiskInodes}
}

// newWorkspace makes the workspace at dir for a sandbox with limits l that
// sees it per mode; the sandbox gets its View.
func (s *Service) newWorkspace(ctx context.Context, dir string, l runner.Limits, mode runner.WorkspaceMode) (*workspace.Workspace, error) {
	w, err := s.cfg.Workspaces.Create(ctx, dir, diskLimits(l), mode == runner.WorkspaceReadOnly)
	if err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	return w, nil
}

// releaseWorkspace releases w (nil: none); what Release could not remove
// goes on the cleanup list (retried with backoff, cleanup.go).
func (s *Service) releaseWorkspace(w *workspace.Workspace) {
	if w == nil {
		return
	}
	if err := w.Release(); err != nil {
		s.log.Warn("release workspace", "dir", w.Dir, "err", err)
		s.removeWorkspace(w.Dir)
		if w.View != w.Dir {
			s.removeWorkspace(w.View)
		}
	}
}

// ErrNoSpace: a write into a workspace (an upload) found its filesystem
// full (bytes or inodes): the session's disk limit.
var ErrNoSpace = errors.New("workspace full")

// noSpace wraps a write error that is ENOSPC or EDQUOT as ErrNoSpace.
func noSpace(err error, what string) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %s: the session's workspace has no space left (its disk limit)", ErrNoSpace, what)
	}
	return err
}
