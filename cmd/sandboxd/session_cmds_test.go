package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
)

// newSessionServer serves the API over a real job service with the fake
// runner, so sessions and files work end to end.
func newSessionServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{
		Name: "sh", Description: "Run sh.", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`),
		Command: func(a map[string]any) (tools.Command, error) {
			c, _ := a["command"].(string)
			return tools.Command{Args: []string{"/bin/sh", "-c", c}}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	svc, err := job.New(job.Config{WorkDir: filepath.Join(dir, "work")}, st, reg, fake.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(svc, api.Options{}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
		st.Close()
	})
	return srv.URL
}

func TestSessionAndFilesCommands(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SANDBOXD_URL": newSessionServer(t)}
	r := runCLI(t, env, nil, "session", "create", "--effects", "exec,file_read,file_write", "--ttl", "1h", "--idle", "10m")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "ses_") {
		t.Fatalf("create: %+v", r)
	}
	if r := runCLI(t, env, nil, "session", "list"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "active") {
		t.Fatalf("list: %+v", r)
	}
	if r := runCLI(t, env, nil, "run", "sh", "--session", id, "--command", "echo from-job > out.txt"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	local := t.TempDir()
	if r := runCLI(t, env, nil, "files", "get", "--session", id, "out.txt", filepath.Join(local, "out.txt")); r.code != 0 {
		t.Fatalf("files get: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "out.txt")); string(b) != "from-job\n" {
		t.Fatalf("downloaded %q", b)
	}
	// A directory goes up as a tar and comes back as one.
	src := filepath.Join(local, "src")
	os.MkdirAll(filepath.Join(src, "pkg"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "a.txt"), []byte("A"), 0o644)
	if r := runCLI(t, env, nil, "files", "put", "--session", id, src, "project"); r.code != 0 {
		t.Fatalf("files put dir: %+v", r)
	}
	if r := runCLI(t, env, nil, "run", "sh", "--session", id, "--command", "cat project/pkg/a.txt"); r.stdout != "A\n" {
		t.Fatalf("uploaded dir: %+v", r)
	}
	back := filepath.Join(local, "back")
	if r := runCLI(t, env, nil, "files", "get", "--session", id, "project", back); r.code != 0 {
		t.Fatalf("files get dir: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "pkg", "a.txt")); string(b) != "A" {
		t.Fatalf("downloaded dir file %q", b)
	}
	// "-" writes a directory's tar to stdout; it creates no directory "-".
	r = runCLI(t, env, nil, "files", "get", "--session", id, "project", "-")
	if r.code != 0 {
		t.Fatalf("files get dir -: %+v", r)
	}
	if _, err := os.Stat("-"); err == nil {
		os.RemoveAll("-")
		t.Fatal(`files get DIR - created a directory named "-"`)
	}
	tr := tar.NewReader(strings.NewReader(r.stdout))
	names := map[string]string{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		names[strings.TrimPrefix(h.Name, "./")] = string(b)
	}
	if names["pkg/a.txt"] != "A" {
		t.Fatalf("the tar on stdout holds %v", names)
	}
	if r := runCLI(t, env, nil, "files", "put", "--session", id, filepath.Join(local, "out.txt")); r.code != 0 {
		t.Fatalf("files put file: %+v", r)
	}
	if r := runCLI(t, env, nil, "session", "rm", id); r.code != 0 {
		t.Fatalf("rm: %+v", r)
	}
	if r := runCLI(t, env, nil, "run", "sh", "--session", id, "--command", "true"); r.code != exitUnreachable || !strings.Contains(r.stderr, "session_closed") {
		t.Fatalf("run in removed session: %+v", r)
	}
	if r := runCLI(t, env, nil, "files", "get", "out.txt"); r.code != exitUsage {
		t.Fatalf("missing --session: %+v", r)
	}
}
