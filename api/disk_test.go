package api

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
)

// TestUploadPastDiskLimit: an upload that does not fit in the session's
// workspace (its own filesystem of limits.disk_bytes) is 507
// workspace_full, as openapi.yaml says; a disk limit below the minimum is
// 400.
func TestUploadPastDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workspace filesystems need root")
	}
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(workspace.Options{Root: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := job.New(job.Config{Workspaces: ws}, st, testRegistry(t), fake.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
		st.Close()
	})
	h := &harness{t: t, h: New(svc, Options{})}

	if rec := h.do("POST", "/v1/sessions", `{"limits":{"disk_bytes":1048576}}`); rec.Code != http.StatusBadRequest ||
		!strings.Contains(rec.Body.String(), "disk_bytes") {
		t.Fatalf("session below the disk minimum: %d %s", rec.Code, rec.Body)
	}
	rec := h.do("POST", "/v1/sessions", `{"limits":{"disk_bytes":16777216,"disk_inodes":256}}`)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"disk_bytes":16777216`) {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	s := decodeBody[sessionView](t, rec.Body.Bytes())
	rec = h.do("PUT", "/v1/sessions/"+s.ID+"/files/big.bin", strings.Repeat("x", 17<<20), "Content-Type: application/octet-stream")
	if rec.Code != http.StatusInsufficientStorage || !strings.Contains(rec.Body.String(), `"code":"workspace_full"`) {
		t.Fatalf("PUT 17 MiB into 16: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("PUT", "/v1/sessions/"+s.ID+"/files/small.txt", "fits", "Content-Type: application/octet-stream"); rec.Code != 200 {
		t.Fatalf("PUT a small file: %d %s", rec.Code, rec.Body)
	}
}
