package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/tools"
)

// errNoWorkspace is returned when the job has no workspace to work in.
var errNoWorkspace = errors.New("no workspace: this job has no workspace directory, file tools cannot be used")

// workspace is one call's handle on Env.Workspace. Every file access goes
// through root, so the kernel-backed os.Root checks, not string checks, keep
// the tools inside: "..", absolute symlinks and symlinks leading out are
// refused there.
type workspace struct {
	root    *os.Root
	workDir string // the path models see the workspace under
}

func openWorkspace(env tools.Env, o Options) (*workspace, error) {
	if env.Workspace == "" {
		return nil, errNoWorkspace
	}
	r, err := os.OpenRoot(env.Workspace)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return &workspace{root: r, workDir: o.WorkDir}, nil
}

func (w *workspace) Close() error { return w.root.Close() }

// rel turns a model's path into a name relative to the workspace root. It
// accepts paths under the sandbox's workspace mount (/workspace/x → x) and
// refuses other absolute paths with a clear message; relative paths are only
// tidied, so os.Root still sees and judges every ".." and symlink.
func (w *workspace) rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	if p == "" {
		return ".", nil
	}
	if strings.HasPrefix(p, "/") {
		wd := strings.TrimSuffix(w.workDir, "/")
		switch {
		case p == wd:
			return ".", nil
		case strings.HasPrefix(p, wd+"/"):
			p = strings.TrimLeft(p[len(wd)+1:], "/")
			if p == "" {
				return ".", nil
			}
		default:
			return "", fmt.Errorf("path %q is outside the workspace: use a path relative to %s", p, w.workDir)
		}
	}
	return p, nil
}

// display is how a workspace-relative name is shown to the model.
func display(name string) string {
	if name == "" {
		return "."
	}
	return path.Clean(name)
}

// pathError turns an os/os.Root error into words a model can act on.
func pathError(op, p string, err error) string {
	switch {
	case err == nil:
		return ""
	case isEscape(err):
		return fmt.Sprintf("%s %s: path escapes the workspace (\"..\" above the workspace root, or a symbolic link pointing outside it); only files inside the workspace can be used", op, p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s %s: no such file or directory", op, p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("%s %s: permission denied", op, p)
	case errors.Is(err, fs.ErrExist):
		return fmt.Sprintf("%s %s: already exists", op, p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s %s: %v", op, p, pe.Err)
	}
	return fmt.Sprintf("%s %s: %v", op, p, err)
}

// isEscape reports whether err is os.Root refusing a name that leads out of
// the root. The os package does not export that error, so its text is
// matched; the refusal itself was made by os.Root.
func isEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// openNoBlock opens name for flag with O_NONBLOCK, so a FIFO planted in the
// workspace (by code running in the sandbox) cannot hang the daemon in
// open(2); callers then refuse anything that is not a regular file. On
// regular files O_NONBLOCK changes nothing.
func openNoBlock(root *os.Root, name string, flag int, perm fs.FileMode) (*os.File, error) {
	return root.OpenFile(name, flag|syscall.O_NONBLOCK, perm)
}

// isBinary reports whether a file's first bytes look binary (a NUL byte, as
// git and grep decide).
func isBinary(head []byte) bool {
	for _, c := range head {
		if c == 0 {
			return true
		}
	}
	return false
}

const sniffLen = 8000

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
