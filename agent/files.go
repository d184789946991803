package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxListEntries bounds a list_dir answer so it fits in one frame.
const maxListEntries = 20000

// maxPathBytes is the longest path a file operation takes (the kernel's
// PATH_MAX).
const maxPathBytes = 4096

// rel maps a client path to one relative to the root. Relative paths are
// taken below the root; absolute paths must lie inside it. os.Root
// refuses ".." and symlinks that escape.
func (s *server) rel(p string) (string, error) {
	if s.root == nil {
		return "", errors.New("no root directory configured")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path contains NUL")
	}
	if len(p) > maxPathBytes {
		return "", fmt.Errorf("path is longer than %d bytes", maxPathBytes)
	}
	if p == "" {
		return ".", nil
	}
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(s.rootAbs, filepath.Clean(p))
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("path %q is outside the root %s", p, s.rootAbs)
		}
		return r, nil
	}
	return filepath.Clean(p), nil
}

func (s *server) fileOp(f frame) *frame {
	rel, err := s.rel(f.Path)
	if err != nil {
		return errFrame(err)
	}
	switch f.Type {
	case typeReadFile:
		data, err := s.readFile(rel, f.MaxBytes)
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult, Data: data}
	case typeWriteFile:
		if err := s.writeFile(rel, f.Data, fs.FileMode(f.Mode).Perm()); err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult}
	case typeListDir:
		files, err := s.listDir(rel)
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult, Files: files}
	case typeListTree:
		files, err := s.listTree(rel)
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult, Files: files}
	case typeStat:
		fi, err := s.root.Lstat(rel)
		if err != nil {
			return errFrame(err)
		}
		info := fileInfo(fi)
		return &frame{Type: typeResult, Info: &info}
	case typeRemove:
		if rel == "." {
			return errFrame(errors.New("refusing to remove the root"))
		}
		if f.Recursive {
			err = s.root.RemoveAll(rel)
		} else {
			err = s.root.Remove(rel)
		}
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult}
	}
	return errFrame(fmt.Errorf("unknown message type %q", f.Type))
}

func (s *server) readFile(rel string, max int64) ([]byte, error) {
	if max <= 0 || max > MaxReadFileBytes {
		max = MaxReadFileBytes
	}
	fh, err := s.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", rel)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", rel)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the limit of %d", rel, st.Size(), max)
	}
	// The size may change under us: never read more than max.
	data, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is more than the limit of %d bytes", rel, max)
	}
	return data, nil
}

// writeFile writes data to rel, creating its missing parent directories.
// The file and the directories it creates belong to the code's user
// (ServerOptions.CodeUser), so the code can change and remove them.
func (s *server) writeFile(rel string, data []byte, mode fs.FileMode) error {
	if rel == "." {
		return errors.New("cannot write to the root directory")
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := s.mkdirAll(filepath.Dir(rel)); err != nil {
		return err
	}
	fh, err := s.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := fh.Write(data); err != nil {
		fh.Close()
		return err
	}
	if err := s.opts.CodeUser.chown(fh); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Chmod(mode); err != nil { // an existing file keeps its mode otherwise
		fh.Close()
		return err
	}
	return fh.Close()
}

// mkdirAll creates dir (relative to the root) and its missing parents,
// each owned by the code's user. Components that exist (directories, or
// symlinks os.Root resolves inside the root) are left as they are.
func (s *server) mkdirAll(dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		err := s.root.Mkdir(p, 0o755)
		switch {
		case err == nil:
			if err := s.opts.CodeUser.lchown(s.root, p); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrExist):
			return err
		}
	}
	return nil
}

func (s *server) listDir(rel string) ([]FileInfo, error) {
	fh, err := s.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	entries, err := fh.ReadDir(maxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(entries) > maxListEntries {
		return nil, fmt.Errorf("%s has more than %d entries", rel, maxListEntries)
	}
	out := make([]FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, fileInfo(fi))
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listTree lists everything below the directory rel (not rel itself),
// each entry named by its slash path relative to rel, parents before
// their children; symlinks are listed, never followed. At most
// maxListEntries in all.
func (s *server) listTree(rel string) ([]FileInfo, error) {
	sub, err := s.root.OpenRoot(rel)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	var out []FileInfo
	err = fs.WalkDir(sub.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != "." && errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if p == "." {
			return nil
		}
		if len(out) == maxListEntries {
			return fmt.Errorf("%s has more than %d entries", rel, maxListEntries)
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		info := fileInfo(fi)
		info.Name = p
		out = append(out, info)
		return nil
	})
	return out, err
}

func fileInfo(fi fs.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), IsDir: fi.IsDir(), ModTime: fi.ModTime()}
}
