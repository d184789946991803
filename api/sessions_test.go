package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
)

var _ SessionService = (*job.Service)(nil)

// newServiceHarness serves the API over a real job service with the fake
// runner (sessions need real workspaces).
func newServiceHarness(t *testing.T, opts Options) (*harness, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	reg := testRegistry(t)
	if err := reg.Register(&tools.Tool{
		Name: "writer", Description: "Write a file.", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileWrite},
		InputSchema: []byte(`{"type":"object"}`),
		Command: func(map[string]any) (tools.Command, error) {
			return tools.Command{Args: []string{"/bin/sh", "-c", "echo made > made.txt"}}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	svc, err := job.New(job.Config{WorkDir: work, Sessions: config.Sessions{MaxPerTenant: 2}}, st, reg, fake.New())
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
	return &harness{t: t, h: New(svc, opts)}, work
}

func decodeBody[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestSessionsAPI(t *testing.T) {
	t.Parallel()
	keys := map[string]string{"ka": "acme", "kb": "other"}
	h, work := newServiceHarness(t, Options{Keys: keys})
	auth := "Authorization: Bearer ka"

	rec := h.do("POST", "/v1/sessions", `{"ttl_seconds":600,"idle_timeout_seconds":60}`, auth)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	s := decodeBody[sessionView](t, rec.Body.Bytes())
	if s.State != wire.SessionActive || s.TTLSeconds != 600 || s.IdleTimeoutSeconds != 60 || len(s.Effects) != 3 {
		t.Fatalf("session = %+v", s)
	}
	base := "/v1/sessions/" + s.ID

	if rec := h.do("GET", base, "", auth); rec.Code != 200 {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", base, "", "Authorization: Bearer kb"); rec.Code != 404 {
		t.Fatalf("other tenant get: %d", rec.Code)
	}
	if rec := h.do("GET", "/v1/sessions", "", auth); rec.Code != 200 || !strings.Contains(rec.Body.String(), s.ID) {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", "/v1/sessions", "", "Authorization: Bearer kb"); strings.Contains(rec.Body.String(), s.ID) {
		t.Fatalf("other tenant lists it: %s", rec.Body)
	}

	// A job in the session writes a file; files GET reads it.
	rec = h.do("POST", "/v1/jobs?wait=10s", `{"tool":"writer","arguments":{},"session_id":"`+s.ID+`"}`, auth)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"session_id":"`+s.ID+`"`) {
		t.Fatalf("job: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", base+"/files/made.txt", "", auth); rec.Code != 200 || rec.Body.String() != "made\n" {
		t.Fatalf("file get: %d %q", rec.Code, rec.Body)
	}
	if rec := h.do("PUT", base+"/files/top.bin", "raw\x00bytes", auth, "Content-Type: application/octet-stream"); rec.Code != 200 {
		t.Fatalf("file put: %d %s", rec.Code, rec.Body)
	}
	// Nested paths: OpenAPI path parameters cannot hold slashes, so these
	// are not checked against the spec.
	if rec, _ := h.serve("PUT", base+"/files/dir/up.bin", "raw", auth, "Content-Type: application/octet-stream"); rec.Code != 200 {
		t.Fatalf("nested file put: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := h.serve("GET", base+"/files/dir/up.bin", "", auth); rec.Code != 200 || rec.Body.String() != "raw" {
		t.Fatalf("nested file get: %d %s", rec.Code, rec.Body)
	}
	rec = h.do("GET", base+"/files/dir", "", auth)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"up.bin"`) {
		t.Fatalf("dir listing: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", base+"/files/nope", "", auth); rec.Code != 404 {
		t.Fatalf("missing file: %d", rec.Code)
	}

	// Archives: a bad entry refuses the whole upload.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"ok.txt", "../evil"} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
		tw.Write([]byte("x"))
	}
	tw.Close()
	rec = h.do("POST", base+"/archive?path=up", buf.String(), auth, "Content-Type: application/x-tar")
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "..") {
		t.Fatalf("evil archive: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(work, "sessions", s.ID, "up")); !os.IsNotExist(err) {
		t.Fatal("refused archive wrote files")
	}
	if rec := h.do("GET", base+"/archive?path=dir", "", auth); rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-tar" {
		t.Fatalf("archive get: %d %s", rec.Code, rec.Body)
	}

	// Effects: a read-only session refuses a writing tool.
	rec = h.do("POST", "/v1/sessions", `{"effects":["exec","file_read"]}`, auth)
	ro := decodeBody[sessionView](t, rec.Body.Bytes())
	rec = h.do("POST", "/v1/jobs", `{"tool":"writer","arguments":{},"session_id":"`+ro.ID+`"}`, auth)
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "effect_not_allowed") || !strings.Contains(rec.Body.String(), ro.ID) {
		t.Fatalf("effect refused: %d %s", rec.Code, rec.Body)
	}
	// Limit (2 per tenant) and unsupported http.
	if rec := h.do("POST", "/v1/sessions", ``, auth); rec.Code != 429 || !strings.Contains(rec.Body.String(), "session_limit") {
		t.Fatalf("limit: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/sessions", `{"effects":["http"]}`, "Authorization: Bearer kb"); rec.Code != 422 || !strings.Contains(rec.Body.String(), "unsupported") {
		t.Fatalf("http: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/sessions", `{"bogus":1}`, auth); rec.Code != 400 {
		t.Fatalf("bad body: %d", rec.Code)
	}

	// Delete.
	if rec := h.do("DELETE", base, "", "Authorization: Bearer kb"); rec.Code != 404 {
		t.Fatalf("other tenant delete: %d", rec.Code)
	}
	rec = h.do("DELETE", base, "", auth)
	if rec.Code != 200 || decodeBody[sessionView](t, rec.Body.Bytes()).State != wire.SessionClosed {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(work, "sessions", s.ID)); !os.IsNotExist(err) {
		t.Fatal("workspace not removed")
	}
	if rec := h.do("GET", base+"/files/made.txt", "", auth); rec.Code != 409 {
		t.Fatalf("files of a closed session: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/jobs", `{"tool":"writer","session_id":"`+s.ID+`"}`, auth); rec.Code != 409 {
		t.Fatalf("job in a closed session: %d %s", rec.Code, rec.Body)
	}
}
