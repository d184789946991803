package kubernetes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/policy"
)

// A pod's workspace is its own volume (the workspace driver's
// filesystem, or an emptyDir); the host workspace sandboxd keeps (what
// uploads, archives and in-process tools use) is a copy of it, which a
// mirror keeps in step through the agent: push sends what changed on the
// host since the last sync to the pod (before the pod uses it: an Exec,
// a REPL call), pull brings what changed in the pod back (after), both
// deletions included. Each side's changes are found against what both
// held at the last sync (base), so neither side's change is overwritten
// by the other's stale copy; a file changed on both sides between two
// syncs keeps the side that syncs last (the pod's, since sandboxd pushes
// before and pulls after each call). Through os.Root and the agent's own
// root: a symlink the code planted never leads out of either workspace.
// Not carried: symlinks and other special files, modes beyond the
// permission bits, and a directory the host made empty (the pod makes a
// file's parents itself).

// maxSyncFile bounds one file copied either way (the agent's frame limit).
const maxSyncFile = agent.MaxReadFileBytes

// mirror is one pod's workspace sync state.
type mirror struct {
	host string

	mu   sync.Mutex
	base map[string]synced // slash path relative to the root -> what both held
}

// synced is a path as both sides held it at the last sync. The mtimes
// let a sync skip reading a file neither side touched; zero is unknown.
type synced struct {
	dir       bool
	sum       [sha256.Size]byte
	size      int64
	hostMtime time.Time
	podMtime  time.Time
}

func newMirror(host string) *mirror { return &mirror{host: host, base: map[string]synced{}} }

// push sends the host's changes since the last sync to the pod.
func (m *mirror) push(ctx context.Context, cl *agent.Client) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	root, err := os.OpenRoot(m.host)
	if err != nil {
		return err
	}
	defer root.Close()
	seen := map[string]bool{}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if d.IsDir() {
			// Known to the base only once the pod has it too (pull).
			seen[p] = true
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		seen[p] = true
		b, known := m.base[p]
		if known && !b.dir && b.size == fi.Size() && b.hostMtime.Equal(fi.ModTime()) {
			return nil
		}
		if fi.Size() > maxSyncFile {
			return fmt.Errorf("%s: %d bytes, more than %d", p, fi.Size(), maxSyncFile)
		}
		data, err := root.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		if known && !b.dir && b.sum == sum {
			b.hostMtime = fi.ModTime()
			m.base[p] = b
			return nil
		}
		if known && b.dir {
			if err := removeInPod(ctx, cl, p); err != nil {
				return err
			}
			m.forget(p)
		}
		if err := cl.WriteFile(ctx, p, data, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		m.base[p] = synced{sum: sum, size: fi.Size(), hostMtime: fi.ModTime()}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range m.gone(seen) {
		if err := removeInPod(ctx, cl, p); err != nil {
			return err
		}
		m.forget(p)
	}
	return nil
}

// pull brings the pod's changes since the last sync to the host.
func (m *mirror) pull(ctx context.Context, cl *agent.Client) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	root, err := os.OpenRoot(m.host)
	if err != nil {
		return err
	}
	defer root.Close()
	tree, err := podTree(ctx, cl)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range tree {
		p := e.Name
		hp := filepath.FromSlash(p)
		switch {
		case e.IsDir:
			seen[p] = true
			if fi, err := root.Lstat(hp); err == nil && !fi.IsDir() {
				if err := root.Remove(hp); err != nil {
					return err
				}
			}
			if err := root.MkdirAll(hp, 0o755); err != nil {
				return err
			}
			own(root, hp)
			m.base[p] = synced{dir: true}
		case e.Mode.IsRegular():
			seen[p] = true
			b, known := m.base[p]
			if known && !b.dir && b.size == e.Size && b.podMtime.Equal(e.ModTime) {
				continue
			}
			if e.Size > maxSyncFile {
				return fmt.Errorf("%s: %d bytes, more than %d", p, e.Size, maxSyncFile)
			}
			data, err := cl.ReadFile(ctx, p, maxSyncFile)
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			sum := sha256.Sum256(data)
			if !known || b.dir || b.sum != sum {
				if fi, err := root.Lstat(hp); err == nil && fi.IsDir() {
					if err := root.RemoveAll(hp); err != nil {
						return err
					}
				}
				if err := root.WriteFile(hp, data, e.Mode.Perm()); err != nil {
					return err
				}
				if err := root.Chmod(hp, e.Mode.Perm()); err != nil { // an existing file keeps its mode otherwise
					return err
				}
				own(root, hp)
			}
			fi, err := root.Lstat(hp)
			if err != nil {
				return err
			}
			m.base[p] = synced{sum: sum, size: e.Size, hostMtime: fi.ModTime(), podMtime: e.ModTime}
		}
	}
	for _, p := range m.gone(seen) {
		if err := root.RemoveAll(filepath.FromSlash(p)); err != nil {
			return err
		}
		m.forget(p)
	}
	return nil
}

// podTree is everything in the pod's workspace, named by slash path,
// parents first: one ListTree request, or for an older agent a ListDir
// per directory.
func podTree(ctx context.Context, cl *agent.Client) ([]agent.FileInfo, error) {
	tree, err := cl.ListTree(ctx, ".")
	if !errors.Is(err, errors.ErrUnsupported) {
		if err != nil {
			return nil, fmt.Errorf("list the workspace: %w", err)
		}
		return tree, nil
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := cl.ListDir(ctx, dir)
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		for _, e := range ents {
			e.Name = path.Join(dir, e.Name)
			tree = append(tree, e)
			if e.IsDir {
				if err := walk(e.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return tree, walk(".")
}

// gone lists the base's paths not seen, parents before children and
// without the children of a listed directory (removing it removes them).
func (m *mirror) gone(seen map[string]bool) []string {
	var out []string
	for p := range m.base {
		if !seen[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	listed := map[string]bool{}
	kept := out[:0]
next:
	for _, p := range out {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if listed[d] {
				continue next // "a-b" sorts between "a" and "a/x"
			}
		}
		listed[p] = true
		kept = append(kept, p)
	}
	return kept
}

// forget drops p and everything below it from the base.
func (m *mirror) forget(p string) {
	for q := range m.base {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(m.base, q)
		}
	}
}

// removeInPod removes p in the pod; already gone is not an error.
func removeInPod(ctx context.Context, cl *agent.Client, p string) error {
	err := cl.Remove(ctx, p, true)
	if err == nil {
		return nil
	}
	if _, serr := cl.Stat(ctx, p); serr != nil && cl.Err() == nil {
		return nil // gone (the agent's answer for a missing path is an error)
	}
	return fmt.Errorf("remove %s: %w", p, err)
}

// own gives what pull wrote to the code's user, as every other runner's
// host workspace holds what the code wrote (when sandboxd can: root).
func own(root *os.Root, p string) {
	if os.Geteuid() == 0 {
		_ = root.Lchown(p, policy.CodeUID, policy.CodeGID)
	}
}
