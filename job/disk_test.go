package job_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
)

// boundedHarness is a session harness whose workspaces are filesystems of
// their own (the daemon's setup); it needs root.
func boundedHarness(t *testing.T, cfg job.Config) *sessHarness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workspace filesystems need root")
	}
	ws, err := workspace.New(workspace.Options{Root: filepath.Join(t.TempDir(), "work")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workspaces = ws
	return newSessHarness(t, nil, cfg)
}

func mountOpts(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == dir {
			return f[5]
		}
	}
	return ""
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestSessionDiskLimit: a session's workspace is a filesystem of its
// disk limit; the code in it gets ENOSPC at the limit, and uploads that do
// not fit are ErrNoSpace and change nothing.
func TestSessionDiskLimit(t *testing.T) {
	h := boundedHarness(t, job.Config{
		Limits:   config.Limits{Ceilings: runner.Limits{DiskBytes: 64 << 20}},
		Sessions: config.Sessions{MaxFileBytes: 32 << 20},
	})
	ctx := t.Context()
	for _, bad := range []runner.Limits{{DiskBytes: 1}, {DiskBytes: 128 << 20}, {DiskInodes: 3}} {
		if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Limits: bad}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("limits %+v: %v, want ErrInvalid", bad, err)
		}
	}
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Limits: runner.Limits{DiskBytes: 16 << 20, DiskInodes: 256}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.DiskBytes != 16<<20 || s.Limits.DiskInodes != 256 {
		t.Errorf("session limits %+v", s.Limits)
	}
	ws := filepath.Join(h.work, "sessions", s.ID)
	opts := mountOpts(t, ws)
	if !strings.Contains(opts, "nosuid") || !strings.Contains(opts, "nodev") {
		t.Fatalf("session workspace mount options %q, want a nosuid,nodev mount", opts)
	}

	// The code: bytes, then files.
	j := h.run(t, "acme", s.ID, "sh", `{"cmd":"dd if=/dev/zero of=big bs=1M count=64 2>&1; echo rc=$?"}`)
	if out := j.Result.Content; !strings.Contains(out, "No space left on device") || !strings.Contains(out, "rc=1") {
		t.Fatalf("dd past the limit: %q", out)
	}
	j = h.run(t, "acme", s.ID, "sh", `{"cmd":"rm big; i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done; echo files=$i; rm -f f*"}`)
	if out := j.Result.Content; !strings.Contains(out, "files=2") {
		t.Fatalf("files until ENOSPC: %q, want about 240", out)
	}

	// Uploads.
	if _, err := h.svc.PutFile(ctx, "acme", s.ID, "big.bin", bytes.NewReader(make([]byte, 20<<20))); !errors.Is(err, job.ErrNoSpace) {
		t.Fatalf("PutFile past the limit: %v, want ErrNoSpace", err)
	}
	if _, err := h.svc.PutFile(ctx, "acme", s.ID, "small.txt", strings.NewReader("ok")); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, ws); len(got) != 1 || got[0] != "small.txt" {
		t.Fatalf("workspace after a refused PutFile: %v", got)
	}
	big := tarOf(t, nil, tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: 12 << 20})
	if _, err := h.svc.PutArchive(ctx, "acme", s.ID, "up", bytes.NewReader(big)); !errors.Is(err, job.ErrNoSpace) {
		t.Fatalf("PutArchive of 12 MiB (spooled and unpacked in 16): %v, want ErrNoSpace", err)
	}
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("many/f%03d", i)] = ""
	}
	if _, err := h.svc.PutArchive(ctx, "acme", s.ID, "up", bytes.NewReader(tarOf(t, files))); !errors.Is(err, job.ErrNoSpace) {
		t.Fatalf("PutArchive of 300 entries into 256 inodes: %v, want ErrNoSpace", err)
	}
	if got := entries(t, ws); len(got) != 1 {
		t.Fatalf("workspace after refused archives: %v", got)
	}

	// An archive that passes the check but runs out of blocks while
	// unpacking (its directory outgrows the one block the check counts):
	// what it created is removed again. 16 KiB are left: the spooled
	// (gzipped) archive takes one block, the check wants two more, the
	// unpacked directory four.
	j = h.run(t, "acme", s.ID, "sh", `{"cmd":"dd if=/dev/zero of=fill bs=64k 2>/dev/null; rm small.txt; a=$(df -B1 --output=avail . | tail -1); fallocate -l $((a-16384)) eat && df -B1 --output=avail . | tail -1"}`)
	if left := strings.TrimSpace(j.Result.Content); left != "16384" {
		t.Fatalf("left for the archive: %q bytes, want 16384", left)
	}
	files = map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("d/a-rather-long-file-name-to-fill-directory-blocks-%03d", i)] = ""
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarOf(t, files))
	zw.Close()
	_, err = h.svc.PutArchive(ctx, "acme", s.ID, "up", &gz)
	if !errors.Is(err, job.ErrNoSpace) || strings.Contains(err.Error(), "unpacks to") {
		t.Fatalf("PutArchive whose directory outgrows the space: %v, want ErrNoSpace while unpacking", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "up")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused archive left %v", err)
	}

	// Close: the filesystem goes with the session.
	if _, err := h.svc.CloseSession(ctx, "acme", s.ID); err != nil {
		t.Fatal(err)
	}
	if o := mountOpts(t, ws); o != "" {
		t.Errorf("workspace still mounted after close: %s", o)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after close: %v", err)
	}
}

// TestOneShotWorkspaceBounded: a one-shot job's sandbox gets a workspace
// of its disk limit, released after the job.
func TestOneShotWorkspaceBounded(t *testing.T) {
	h := boundedHarness(t, job.Config{})
	req := job.SubmitRequest{Limits: runner.Limits{DiskBytes: 16 << 20}}
	req.Call.Name, req.Call.Arguments = "sh", []byte(`{"cmd":"df -B1 --output=size . | tail -1; grep \" $PWD \" /proc/self/mountinfo"}`)
	j, _, err := h.svc.Submit(t.Context(), "acme", req)
	if err != nil {
		t.Fatal(err)
	}
	if j, err = h.svc.Wait(t.Context(), "acme", j.ID); err != nil {
		t.Fatal(err)
	}
	out := j.Result.Content
	var size int64
	fmt.Sscan(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]), &size)
	if size <= 0 || size > 16<<20 || !strings.Contains(out, "nosuid,nodev") {
		t.Fatalf("one-shot workspace: %q, want a nosuid,nodev filesystem of at most 16 MiB", out)
	}
	// Released after the job (in the background).
	ws := filepath.Join(h.work, j.ID)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st unix.Stat_t
		err := unix.Stat(ws, &st)
		if mountOpts(t, ws) == "" && errors.Is(err, unix.ENOENT) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the one-shot workspace is left after the job (mount %q, stat %v)", mountOpts(t, ws), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
