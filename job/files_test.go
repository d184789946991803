package job_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

func tarOf(t *testing.T, files map[string]string, extra ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	for _, h := range extra {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
	}
	tw.Close()
	return buf.Bytes()
}

func TestSessionArchive(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Sessions: config.Sessions{MaxFileBytes: 10}})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(h.work, "sessions", s.ID)
	n, err := h.svc.PutArchive(ctx, "acme", s.ID, "src", bytes.NewReader(tarOf(t, map[string]string{"a.py": "print(1)", "pkg/b.py": "x"})))
	if err != nil || n != 2 {
		t.Fatalf("PutArchive = %d, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src", "pkg", "b.py")); string(b) != "x" {
		t.Fatalf("b.py = %q", b)
	}
	for _, bad := range []tar.Header{
		{Name: "../evil", Typeflag: tar.TypeReg, Size: 1},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1},
	} {
		_, err := h.svc.PutArchive(ctx, "acme", s.ID, "up", bytes.NewReader(tarOf(t, map[string]string{"good.txt": "g"}, bad)))
		if !errors.Is(err, job.ErrInvalid) {
			t.Fatalf("%s: %v", bad.Name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "up")); !os.IsNotExist(err) {
		t.Fatalf("a refused archive wrote something: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "evil")); !os.IsNotExist(err) {
		t.Fatal("escaped the workspace")
	}
	// Round trip through GetArchive.
	var out bytes.Buffer
	if err := h.svc.GetArchive(ctx, "acme", s.ID, "src", &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hd.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "a.py") || !strings.Contains(got, "pkg/b.py") {
		t.Fatalf("archive names = %s", got)
	}
	// Size limit and escapes of single files.
	if _, err := h.svc.PutFile(ctx, "acme", s.ID, "big", strings.NewReader(strings.Repeat("x", 11))); !errors.Is(err, job.ErrTooLarge) {
		t.Fatalf("big file: %v", err)
	}
	if _, err := h.svc.PutFile(ctx, "acme", s.ID, "../x", strings.NewReader("x")); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("escape: %v", err)
	}
	if err := os.Symlink("/etc", filepath.Join(ws, "etc")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "etc/hostname"); err == nil {
		t.Fatal("followed a symlink out of the workspace")
	}
	if _, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "nope"); !errors.Is(err, job.ErrFileNotFound) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestSessionFileErrors: what a client can get wrong about a path is
// ErrInvalid with the reason, not a server error: a symbolic link on the
// path that leads outside the workspace (files GET and PUT, archives both
// ways), a 10,000-character path, a symlink loop; a missing file reads
// "<path>: no such file or directory" and is ErrNotFound.
func TestSessionFileErrors(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(h.work, "sessions", s.ID)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"out": outside, "loop": "loop"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("a", 10_000)
	archive := tarOf(t, map[string]string{"x.txt": "x"})
	for _, tc := range []struct {
		name, want string
		do         func() error
	}{
		{"GET through an escaping link", "leads outside the workspace", func() error {
			_, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "out/secret")
			return err
		}},
		{"PUT through an escaping link", "leads outside the workspace", func() error {
			_, err := h.svc.PutFile(ctx, "acme", s.ID, "out/new", strings.NewReader("x"))
			return err
		}},
		{"archive of an escaping link", "leads outside the workspace", func() error {
			return h.svc.GetArchive(ctx, "acme", s.ID, "out", io.Discard)
		}},
		{"archive into an escaping link", "leads outside the workspace", func() error {
			_, err := h.svc.PutArchive(ctx, "acme", s.ID, "out/sub", bytes.NewReader(archive))
			return err
		}},
		{"GET a 10,000-character path", "more than the 4096", func() error {
			_, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, long)
			return err
		}},
		{"PUT a 10,000-character path", "more than the 4096", func() error {
			_, err := h.svc.PutFile(ctx, "acme", s.ID, long, strings.NewReader("x"))
			return err
		}},
		{"a 300-byte name", "more than the 255", func() error {
			_, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, strings.Repeat("b", 300))
			return err
		}},
		{"a symlink loop", "symbolic links", func() error {
			_, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "loop/x")
			return err
		}},
	} {
		err := tc.do()
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("PUT wrote outside the workspace")
	}
	_, _, _, err = h.svc.OpenFile(ctx, "acme", s.ID, "nope.txt")
	if !errors.Is(err, job.ErrFileNotFound) || !errors.Is(err, job.ErrNotFound) || err.Error() != "nope.txt: no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	if _, err := h.svc.GetSession(ctx, "acme", "ses_nope"); !errors.Is(err, job.ErrNotFound) || strings.Contains(err.Error(), "job not found") {
		t.Errorf("missing session: %v", err)
	}
}
