package job

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/ids"
)

// Workspace file transfer. Everything runs on the host inside the
// session's workspace directory (bind-mounted into the sandbox at
// /workspace) through os.Root, so no path, symlink or ".." escapes it.

// FileInfo is one entry of a directory listing.
type FileInfo struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

func fileInfo(fi fs.FileInfo) FileInfo {
	t := "other"
	switch {
	case fi.Mode().IsRegular():
		t = "file"
	case fi.IsDir():
		t = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		t = "symlink"
	}
	return FileInfo{Name: fi.Name(), Type: t, Size: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()}
}

// workspacePath turns a client path ("a/b.txt", "/workspace/a/b.txt",
// "/a/b.txt") into a name relative to the workspace root ("." for the
// root). ".." components are ErrInvalid.
func workspacePath(p string) (string, error) {
	if p == "/workspace" || strings.HasPrefix(p, "/workspace/") {
		p = strings.TrimPrefix(p, "/workspace")
	}
	p = strings.TrimLeft(p, "/")
	if err := checkPathLength(p); err != nil {
		return "", err
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: NUL in path", ErrInvalid)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: path %q: \"..\" is not allowed", ErrInvalid, p)
		}
	}
	if p == "" {
		return ".", nil
	}
	return path.Clean(p), nil
}

// openWorkspace opens the active session's workspace root.
func (s *Service) openWorkspace(ctx context.Context, tenant, id string) (*liveSession, *os.Root, error) {
	ls, err := s.activeSession(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(ls.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open session workspace: %w", err)
	}
	return ls, root, nil
}

// chown gives a file to the sandbox user when the daemon can (root).
func (s *Service) chown(root *os.Root, name string) {
	if os.Geteuid() != 0 || s.cfg.FileUID < 0 {
		return
	}
	if err := root.Lchown(name, s.cfg.FileUID, s.cfg.FileGID); err != nil {
		s.log.Warn("chown uploaded file", "name", name, "err", err)
	}
}

// mkdirAll creates dir and its missing parents, owned by the sandbox user.
func (s *Service) mkdirAll(root *os.Root, dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	if fi, err := root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s exists and is not a directory", ErrConflict, dir)
		}
		return nil
	}
	if err := s.mkdirAll(root, path.Dir(dir)); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	s.chown(root, dir)
	return nil
}

// PutFile writes r to path in the session's workspace (creating parent
// directories), at most Sessions.MaxFileBytes (ErrTooLarge) and what the
// workspace's disk limit leaves (ErrNoSpace). A refused upload leaves the
// workspace as it was (parent directories it made aside).
func (s *Service) PutFile(ctx context.Context, tenant, id, p string, r io.Reader) (FileInfo, error) {
	info, err := s.putFile(ctx, tenant, id, p, r)
	return info, pathFault(err, p)
}

func (s *Service) putFile(ctx context.Context, tenant, id, p string, r io.Reader) (FileInfo, error) {
	name, err := workspacePath(p)
	if err != nil {
		return FileInfo{}, err
	}
	if name == "." {
		return FileInfo{}, fmt.Errorf("%w: a file path is required", ErrInvalid)
	}
	ls, root, err := s.openWorkspace(ctx, tenant, id)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	ls.bumpWorkspace() // before and after the write (the result cache)
	defer ls.bumpWorkspace()
	if err := s.mkdirAll(root, path.Dir(name)); err != nil {
		return FileInfo{}, noSpace(err, "write "+name)
	}
	tmp := path.Join(path.Dir(name), ".sandboxd-upload-"+ids.New(""))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileInfo{}, noSpace(fmt.Errorf("write %s: %w", name, err), "write "+name)
	}
	max := s.cfg.Sessions.MaxFileBytes
	n, err := io.Copy(f, io.LimitReader(r, max+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > max {
		err = fmt.Errorf("%w: the file is larger than %d bytes", ErrTooLarge, max)
	}
	if err == nil {
		s.chown(root, tmp)
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		if errors.Is(err, ErrTooLarge) {
			return FileInfo{}, err
		}
		return FileInfo{}, noSpace(fmt.Errorf("write %s: %w", name, err), "write "+name)
	}
	s.touch(ls)
	fi, err := root.Stat(name)
	if err != nil {
		return FileInfo{}, err
	}
	info := fileInfo(fi)
	info.Name = name
	return info, nil
}

// OpenFile opens path in the session's workspace. For a regular file it
// returns a reader the caller must close; for a directory, its listing.
func (s *Service) OpenFile(ctx context.Context, tenant, id, p string) (io.ReadCloser, FileInfo, []FileInfo, error) {
	rc, info, list, err := s.openFile(ctx, tenant, id, p)
	return rc, info, list, pathFault(err, p)
}

func (s *Service) openFile(ctx context.Context, tenant, id, p string) (io.ReadCloser, FileInfo, []FileInfo, error) {
	name, err := workspacePath(p)
	if err != nil {
		return nil, FileInfo{}, nil, err
	}
	_, root, err := s.openWorkspace(ctx, tenant, id)
	if err != nil {
		return nil, FileInfo{}, nil, err
	}
	defer root.Close()
	fi, err := root.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, FileInfo{}, nil, fmt.Errorf("%s: %w", name, ErrFileNotFound)
	}
	if err != nil {
		return nil, FileInfo{}, nil, fmt.Errorf("file %s: %w", name, err)
	}
	info := fileInfo(fi)
	info.Name = name
	if fi.IsDir() {
		entries, err := fs.ReadDir(root.FS(), name)
		if err != nil {
			return nil, FileInfo{}, nil, fmt.Errorf("list %s: %w", name, err)
		}
		list := make([]FileInfo, 0, len(entries))
		for _, de := range entries {
			if fi, err := de.Info(); err == nil {
				list = append(list, fileInfo(fi))
			}
		}
		return nil, info, list, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, FileInfo{}, nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, name)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, FileInfo{}, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return f, info, nil, nil
}

// PutArchive unpacks a tar (optionally gzipped) into dir of the session's
// workspace. The body is spooled (at most MaxArchiveBytes) into the
// workspace's own filesystem, as a file without a name the sandbox could
// see, so that it counts against the workspace's disk limit, not the
// host's disk (while it unpacks, the archive as sent and its contents both
// take space there). It is checked whole first (checkArchive), and against
// the space and inodes the workspace has left (ErrNoSpace): a refused
// archive writes nothing. Should the workspace fill up while unpacking
// anyway (the sandbox writes meanwhile), the files and directories the
// archive created are removed again (files it overwrote keep what was
// written) and the error is ErrNoSpace. It returns the number of entries
// written.
func (s *Service) PutArchive(ctx context.Context, tenant, id, dir string, r io.Reader) (int, error) {
	n, err := s.putArchive(ctx, tenant, id, dir, r)
	return n, pathFault(err, dir)
}

func (s *Service) putArchive(ctx context.Context, tenant, id, dir string, r io.Reader) (int, error) {
	base, err := workspacePath(dir)
	if err != nil {
		return 0, err
	}
	ls, root, err := s.openWorkspace(ctx, tenant, id)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	ls.bumpWorkspace() // before and after the write (the result cache)
	defer ls.bumpWorkspace()
	spool, err := spoolFile(ls.dir, s.cfg.WorkDir)
	if err != nil {
		return 0, fmt.Errorf("spool archive: %w", err)
	}
	defer spool.Close()
	max := s.cfg.Sessions.MaxArchiveBytes
	n, err := io.Copy(spool, io.LimitReader(r, max+1))
	if err != nil {
		if e := noSpace(err, "spool the archive"); errors.Is(e, ErrNoSpace) {
			return 0, e
		}
		return 0, fmt.Errorf("%w: reading the archive: %v", ErrInvalid, err)
	}
	if n > max {
		return 0, fmt.Errorf("%w: the archive is larger than %d bytes", ErrTooLarge, max)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	need, err := checkArchive(spool, s.cfg.Sessions.MaxArchiveEntries, max)
	if err != nil {
		return 0, err
	}
	if err := fits(ls.dir, need); err != nil {
		return 0, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	var created []string // by this archive, parents first
	mkdir := func(dir string) error {
		if dir == "." || dir == "" {
			return nil
		}
		var missing []string
		for d := dir; d != "." && d != ""; d = path.Dir(d) {
			if _, err := root.Lstat(d); err == nil {
				break
			}
			missing = append(missing, d)
		}
		if err := s.mkdirAll(root, dir); err != nil {
			return err
		}
		for i := len(missing) - 1; i >= 0; i-- {
			created = append(created, missing[i])
		}
		return nil
	}
	undo := func(err error) (int, error) {
		if !errors.Is(err, ErrNoSpace) {
			return 0, err
		}
		for i := len(created) - 1; i >= 0; i-- {
			_ = root.Remove(created[i])
		}
		return 0, err
	}
	if err := mkdir(base); err != nil {
		return undo(noSpace(err, "unpack the archive"))
	}
	tr, err := archiveReader(spool)
	if err != nil {
		return 0, err
	}
	written := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return written, fmt.Errorf("%w: reading the archive: %v", ErrInvalid, err)
		}
		rel, err := checkArchiveEntry(h)
		if err != nil {
			return written, err
		}
		name := path.Join(base, rel)
		if h.Typeflag == tar.TypeDir {
			if err := mkdir(name); err != nil {
				return undo(noSpace(err, "unpack the archive"))
			}
			written++
			continue
		}
		if err := mkdir(path.Dir(name)); err != nil {
			return undo(noSpace(err, "unpack the archive"))
		}
		_, statErr := root.Lstat(name)
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode)&0o777|0o600)
		if err != nil {
			return undo(noSpace(fmt.Errorf("write %s: %w", name, err), "unpack the archive"))
		}
		if statErr != nil {
			created = append(created, name)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return undo(noSpace(fmt.Errorf("write %s: %w", name, err), "unpack the archive"))
		}
		s.chown(root, name)
		written++
	}
	s.touch(ls)
	return written, nil
}

// spoolFile is an unnamed file in dir (O_TMPFILE: invisible, gone when
// closed), or, where the filesystem cannot make one, a named one in
// fallback, removed when closed.
func spoolFile(dir, fallback string) (*spooled, error) {
	f, err := os.OpenFile(dir, os.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return &spooled{File: f}, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) {
		return nil, noSpace(err, "spool the archive")
	}
	f, err = os.CreateTemp(fallback, "archive-*")
	if err != nil {
		return nil, err
	}
	return &spooled{File: f, name: f.Name()}, nil
}

type spooled struct {
	*os.File
	name string
}

func (s *spooled) Close() error {
	err := s.File.Close()
	if s.name != "" {
		os.Remove(s.name)
	}
	return err
}

// fits checks that what an archive needs is free in the workspace at dir.
func fits(dir string, need archiveNeeds) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("workspace space: %w", err)
	}
	bsize := max(st.Bsize, 1)
	bytes := need.blockBytes(bsize)
	free := int64(st.Bavail) * bsize
	if bytes > free || need.inodes > int64(st.Ffree) {
		return fmt.Errorf("%w: the archive unpacks to %d bytes in %d entries; the session's workspace has %d bytes and %d inodes left (its disk limit)",
			ErrNoSpace, bytes, need.inodes, free, st.Ffree)
	}
	return nil
}

// GetArchive writes dir of the session's workspace to w as a tar:
// directories, regular files and symlinks (as links, not followed).
func (s *Service) GetArchive(ctx context.Context, tenant, id, dir string, w io.Writer) error {
	return pathFault(s.getArchive(ctx, tenant, id, dir, w), dir)
}

func (s *Service) getArchive(ctx context.Context, tenant, id, dir string, w io.Writer) error {
	base, err := workspacePath(dir)
	if err != nil {
		return err
	}
	_, root, err := s.openWorkspace(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer root.Close()
	if fi, err := root.Stat(base); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", base, ErrFileNotFound)
	} else if err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrInvalid, base)
	}
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, FIFOs, devices: skipped
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := root.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, io.LimitReader(f, h.Size))
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", base, err)
	}
	return tw.Close()
}
