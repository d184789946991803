package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/sandboxd/sandboxd/agent"
)

// The workspace of a pod is an emptyDir (the pod gets no host path).
// syncIn copies a host workspace's regular files into it through the
// agent at Create (a read-only workspace's through the init container's
// agent, Pod.FillWorkspace, before the sandbox container mounts it
// read-only); syncOut copies the pod's regular files back into the host
// workspace after each Exec of a read-write sandbox. Through
// os.Root: a symlink the code planted never leads out of the host
// workspace. Not carried: empty directories, deletions, symlinks, modes
// beyond the permission bits.

// maxSyncFile bounds one file copied either way (the agent's frame limit).
const maxSyncFile = agent.MaxReadFileBytes

func syncIn(ctx context.Context, cl *agent.Client, host string) error {
	root, err := os.OpenRoot(host)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Size() > maxSyncFile {
			return fmt.Errorf("%s: %d bytes, more than %d", p, fi.Size(), maxSyncFile)
		}
		b, err := root.ReadFile(p)
		if err != nil {
			return err
		}
		return cl.WriteFile(ctx, p, b, fi.Mode().Perm())
	})
}

func syncOut(ctx context.Context, cl *agent.Client, host string) error {
	root, err := os.OpenRoot(host)
	if err != nil {
		return err
	}
	defer root.Close()
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := cl.ListDir(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name)
			switch {
			case e.IsDir:
				if err := root.MkdirAll(filepath.FromSlash(p), 0o755); err != nil {
					return err
				}
				if err := walk(p); err != nil {
					return err
				}
			case e.Mode.IsRegular():
				if e.Size > maxSyncFile {
					return fmt.Errorf("%s: %d bytes, more than %d", p, e.Size, maxSyncFile)
				}
				b, err := cl.ReadFile(ctx, p, maxSyncFile)
				if err != nil {
					return err
				}
				if err := writeIfChanged(root, filepath.FromSlash(p), b, e.Mode.Perm()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(".")
}

func writeIfChanged(root *os.Root, p string, b []byte, mode fs.FileMode) error {
	if old, err := root.ReadFile(p); err == nil && string(old) == string(b) {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.WriteFile(p, b, mode)
}
