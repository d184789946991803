// Package workspace makes the host side of every sandbox workspace, the one
// place sandboxd does (the job service for one-shot jobs, pooled sandboxes
// and sessions; runnertest for the conformance suite).
//
// A workspace is its own filesystem: a sparse file of Limits.Bytes,
// formatted ext4 with Limits.Inodes inodes (a copy of a template that
// mke2fs formatted once per Limits), attached to a loop device and
// mounted nosuid,nodev at the workspace directory on the host. Every runner
// binds that directory into its sandboxes, so every runner's sandbox (and
// every upload) inherits the bound: a full workspace is ENOSPC inside it,
// never a full host disk, and neither set-user-ID bits nor device nodes
// placed in it are honoured. The image file has no name (O_TMPFILE): its
// blocks belong to the loop device, which detaches itself (autoclear) when
// the last mount of it goes; Release unmounts. After a kill -9 the mounts
// stay: Cleanup, at the next start, unmounts everything under Root (and
// only there: another instance's workspaces live under another Root).
//
// Why not a tmpfs with size= and nr_inodes=: a tmpfs inside the sandbox
// dies with it, and sessions keep their workspace across a sandbox restart
// (gVisor restarts the sandbox after an OOM kill); a tmpfs on the host
// would survive that but holds the workspace in RAM, charged to the
// sandbox's memory limit, which an OOM restart does not give back. Disk
// is what the workspace should cost. Why not noexec: running ./script.sh
// and importing the code's own Python modules (and C extensions) from the
// workspace is normal, and the code could run any interpreter on the same
// bytes anyway.
//
// A Manager with Options.Plain makes plain directories instead (no bound,
// no mount flags): for unit tests with fake runners, and for runners that
// bound the workspace themselves.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Limits bound one workspace filesystem. Zero fields take DefaultBytes and
// DefaultInodes.
type Limits struct {
	// Bytes is the size of the filesystem, its own metadata included
	// (about 256 bytes per inode).
	Bytes int64
	// Inodes is the most files, directories and symlinks it can hold (a
	// few are the filesystem's own), at most one per BytesPerInode of
	// Bytes.
	Inodes int64
}

// Bounds of Limits.
const (
	DefaultBytes  = 1 << 30
	DefaultInodes = 65536
	// MinBytes and MinInodes are the smallest limits a workspace (and
	// /tmp, /dev/shm) may have.
	MinBytes  = 16 << 20
	MinInodes = 128
	// BytesPerInode caps Inodes by Bytes: a filesystem gets at most one
	// inode per 4 KiB, so that its inode tables (256 bytes each) take at
	// most 1/16 of it.
	BytesPerInode = 4096
)

// Effective fills zero fields with the defaults and caps Inodes by Bytes.
func (l Limits) Effective() Limits {
	if l.Bytes == 0 {
		l.Bytes = DefaultBytes
	}
	if l.Inodes == 0 {
		l.Inodes = DefaultInodes
	}
	l.Inodes = min(l.Inodes, l.Bytes/BytesPerInode)
	return l
}

// Check reports limits below the minimums (zero fields are defaults).
func (l Limits) Check() error {
	switch {
	case l.Bytes < 0 || l.Inodes < 0:
		return fmt.Errorf("disk limits must not be negative (disk_bytes %d, disk_inodes %d)", l.Bytes, l.Inodes)
	case l.Bytes != 0 && l.Bytes < MinBytes:
		return fmt.Errorf("disk_bytes %d is below the minimum of %d (16 MiB)", l.Bytes, int64(MinBytes))
	case l.Inodes != 0 && l.Inodes < MinInodes:
		return fmt.Errorf("disk_inodes %d is below the minimum of %d", l.Inodes, MinInodes)
	}
	return nil
}

// Options configure a Manager.
type Options struct {
	// Root is the directory every workspace of this Manager lives under,
	// owned by this sandboxd instance alone (its data directory's
	// workspaces): Cleanup unmounts whatever is mounted below it. Created
	// if missing. Required.
	Root string
	// Plain makes plain directories: no filesystem, no bound.
	Plain bool
	// Logger receives what Cleanup and Release could not do. Default:
	// discard.
	Logger *slog.Logger
}

// Manager makes and releases workspaces under one Root. Safe for
// concurrent use.
type Manager struct {
	root  string
	plain bool
	log   *slog.Logger
	fs    *fsMaker // nil when plain

	mu   sync.Mutex
	live map[string]*Workspace // by Dir
}

// New returns a Manager. Unless Plain, it checks that this process can
// make workspace filesystems (root, /dev/loop-control, mke2fs): a sandboxd
// that cannot bound its workspaces refuses to start rather than run
// without the bound.
func New(o Options) (*Manager, error) {
	if o.Root == "" {
		return nil, errors.New("workspace: Root is required")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, fmt.Errorf("workspace: root %q: %w", o.Root, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	m := &Manager{root: root, plain: o.Plain, log: o.Logger, live: map[string]*Workspace{}}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if !o.Plain {
		if m.fs, err = newFSMaker(root); err != nil {
			return nil, fmt.Errorf("workspace: cannot make workspace filesystems (%w); sandboxd needs root, /dev/loop-control and mke2fs (e2fsprogs) to bound workspaces", err)
		}
	}
	return m, nil
}

// Root is the directory the workspaces live under.
func (m *Manager) Root() string { return m.root }

// Bounded reports whether workspaces get their own filesystem (not Plain).
func (m *Manager) Bounded() bool { return !m.plain }

// Workspace is one workspace on the host. Release it exactly once.
type Workspace struct {
	// Dir is the workspace, read-write: what uploads and in-process tools
	// use, and what a read-write sandbox mounts.
	Dir string
	// View is what a sandbox mounts: Dir, or for a workspace created with
	// readOnlyView a read-only, nosuid, nodev bind of it (on the host, so
	// that no runtime's remount can drop those flags).
	View string
	// Limits are the bounds it has (zero when plain).
	Limits Limits

	m        *Manager
	mounted  bool
	viewDir  string // "" when View is Dir
	released bool
}

// Create makes the workspace at dir (which must be below Root and not
// exist as a non-empty directory) bounded by l. readOnlyView adds View, a
// read-only bind of it for sandboxes that must not write. On error nothing
// is left.
func (m *Manager) Create(ctx context.Context, dir string, l Limits, readOnlyView bool) (_ *Workspace, err error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	if !m.below(dir) {
		return nil, fmt.Errorf("workspace %q is not below %s", dir, m.root)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	w := &Workspace{Dir: dir, View: dir, m: m}
	defer func() {
		if err != nil {
			if rerr := w.release(); rerr != nil {
				m.log.Warn("workspace: undo a failed create", "dir", dir, "err", rerr)
			}
		}
	}()
	if !m.plain {
		w.Limits = l.Effective()
		if err := m.fs.make(ctx, dir, w.Limits); err != nil {
			return nil, fmt.Errorf("create workspace filesystem: %w", err)
		}
		w.mounted = true
		if readOnlyView {
			w.viewDir = dir + ".ro"
			if err := readOnlyBind(dir, w.viewDir); err != nil {
				return nil, fmt.Errorf("create workspace: read-only view: %w", err)
			}
			w.View = w.viewDir
		}
	}
	m.mu.Lock()
	m.live[dir] = w
	m.mu.Unlock()
	return w, nil
}

func (m *Manager) below(p string) bool {
	return strings.HasPrefix(p, m.root+string(filepath.Separator))
}

// Release unmounts the workspace (its contents are gone with it) and
// removes its directories. A second call does nothing.
func (w *Workspace) Release() error {
	if w == nil || w.released {
		return nil
	}
	w.m.mu.Lock()
	delete(w.m.live, w.Dir)
	w.m.mu.Unlock()
	return w.release()
}

func (w *Workspace) release() error {
	w.released = true
	var errs []error
	if w.viewDir != "" {
		errs = append(errs, unmountAndRemove(w.viewDir))
	}
	if w.mounted {
		errs = append(errs, unmountAndRemove(w.Dir))
	} else if err := os.RemoveAll(w.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Live is how many workspaces this Manager made and has not released.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}
