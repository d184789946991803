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
