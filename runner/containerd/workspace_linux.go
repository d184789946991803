package containerd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/runner"
)

// Labels recording a workspace chowned for the sandbox user, so that Close
// (or Reap, after a crash) can give it back. Labels are immutable and
// invisible inside the sandbox.
const (
	labelWorkspace      = "sandboxd.workspace"
	labelWorkspaceOwner = "sandboxd.workspace-owner"
)

// workspaceOwner returns "uid:gid" of a read-write workspace that the
// sandbox user does not own, "" when no chown is needed.
func workspaceOwner(spec runner.SandboxSpec) (string, error) {
	if spec.WorkspaceMode != runner.WorkspaceReadWrite {
		return "", nil
	}
	fi, err := os.Stat(spec.Workspace)
	if err != nil {
		return "", err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid == sandboxUID && st.Gid == sandboxUID {
		return "", nil
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
}

// restoreWorkspace gives a chowned workspace back to its owner. Files the
// sandbox created inside keep the sandbox uid.
func restoreWorkspace(labels map[string]string) error {
	path, owner := labels[labelWorkspace], labels[labelWorkspaceOwner]
	if path == "" || owner == "" {
		return nil
	}
	u, g, ok := strings.Cut(owner, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("containerd: bad workspace owner label %q", owner)
	}
	// Only a workspace still owned by the sandbox user is ours to restore.
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != sandboxUID {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("containerd: restore workspace owner: %w", err)
	}
	return nil
}
