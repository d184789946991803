package hostside

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// Labels recording a workspace chowned for the sandbox user, so that Close
// (or Reap, after a crash) can give it back. Labels are immutable and
// invisible inside the sandbox.
const (
	LabelWorkspace      = "sandboxd.workspace"
	LabelWorkspaceOwner = "sandboxd.workspace-owner"
)

// SandboxUID is the user (and group) the code runs as (policy.CodeUID;
// the agent runs as AgentUID).
const SandboxUID = policy.CodeUID

// WorkspaceOwner returns "uid:gid" of a read-write workspace that the
// sandbox user does not own, "" when no chown is needed.
func WorkspaceOwner(spec runner.SandboxSpec) (string, error) {
	if spec.Isolation.Workspace != runner.WorkspaceReadWrite {
		return "", nil
	}
	fi, err := os.Stat(spec.Workspace)
	if err != nil {
		return "", err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid == SandboxUID && st.Gid == SandboxUID {
		return "", nil
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
}

// RestoreWorkspace gives a chowned workspace back to its owner. Files the
// sandbox created inside keep the sandbox uid.
func RestoreWorkspace(labels map[string]string) error {
	path, owner := labels[LabelWorkspace], labels[LabelWorkspaceOwner]
	if path == "" || owner == "" {
		return nil
	}
	u, g, ok := strings.Cut(owner, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("bad workspace owner label %q", owner)
	}
	// Only a workspace still owned by the sandbox user is ours to restore.
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != SandboxUID {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("restore workspace owner: %w", err)
	}
	return nil
}

// MarkWorkspace records in a sandbox's labels the owner of its read-write
// workspace that the sandbox user must get (WorkspaceOwner), so that Close
// or Reap gives it back; the chown itself waits for ChownWorkspace, once
// the labels are on the daemon. It returns the owner, "" when no chown is
// needed.
func MarkWorkspace(spec runner.SandboxSpec, labels map[string]string) (string, error) {
	owner, err := WorkspaceOwner(spec)
	if err != nil {
		return "", fmt.Errorf("create sandbox: workspace: %w", err)
	}
	if owner != "" {
		labels[LabelWorkspace], labels[LabelWorkspaceOwner] = spec.Workspace, owner
	}
	return owner, nil
}

// ChownWorkspace makes a read-write workspace the sandbox user's when
// WorkspaceOwner said it must (owner non-empty), after the container that
// records the owner exists.
func ChownWorkspace(spec runner.SandboxSpec, owner string) error {
	if owner == "" {
		return nil
	}
	if err := os.Chown(spec.Workspace, SandboxUID, SandboxUID); err != nil {
		return fmt.Errorf("create sandbox: make workspace writable: %w", err)
	}
	return nil
}
