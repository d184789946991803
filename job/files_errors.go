package job

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
)

// Limits of a workspace path a client sends, as Linux has them: longer is
// a 400 before anything is opened.
const (
	maxPathBytes    = 4096 // PATH_MAX
	maxPathSegBytes = 255  // NAME_MAX
)

// checkPathLength refuses a path the kernel would refuse with
// ENAMETOOLONG.
func checkPathLength(p string) error {
	if len(p) > maxPathBytes {
		return fmt.Errorf("%w: the path is %d bytes, more than the %d a path may have", ErrInvalid, len(p), maxPathBytes)
	}
	for _, seg := range strings.Split(p, "/") {
		if len(seg) > maxPathSegBytes {
			return fmt.Errorf("%w: a path component is %d bytes, more than the %d a file name may have", ErrInvalid, len(seg), maxPathSegBytes)
		}
	}
	return nil
}

// pathFault turns what os.Root answers about a client's path into the
// client's error: a symbolic link that leads outside the workspace, a
// symlink loop, a component that is not a directory or too long a name
// are ErrInvalid saying so, a missing file ErrFileNotFound; any other
// error is returned as it is (the server's). name is the client's path.
func pathFault(err error, name string) error {
	var pe *fs.PathError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound), errors.Is(err, ErrNoSpace), errors.Is(err, ErrTooLarge), errors.Is(err, ErrConflict):
		return err // already the client's
	case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "path escapes from parent"):
		return fmt.Errorf("%w: %s: a symbolic link on the path leads outside the workspace", ErrInvalid, name)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %s: too many levels of symbolic links", ErrInvalid, name)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %s: a file name is too long", ErrInvalid, name)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %s: a component of the path is not a directory", ErrInvalid, name)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %s is a directory", ErrInvalid, name)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", name, ErrFileNotFound)
	}
	return err
}
