//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

type sessionView struct {
	ID      string   `json:"id"`
	State   string   `json:"state"`
	Reason  string   `json:"reason"`
	Effects []string `json:"effects"`
}

// raw sends a non-JSON body and returns the status and body.
func (s *server) raw(method, path string, body []byte, contentType string) (int, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (s *server) runIn(session, tool string, args any) jobView {
	s.t.Helper()
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": tool, "arguments": args, "session_id": session}, &j)
	if resp.StatusCode != 200 || j.Result == nil {
		s.t.Fatalf("run %s in %s: status %d: %s", tool, session, resp.StatusCode, data)
	}
	return j
}

// metric reads one unlabelled sample from /metrics.
func (s *server) metric(name string) float64 {
	s.t.Helper()
	data := s.getMetrics()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`).FindSubmatch(data)
	if m == nil {
		s.t.Fatalf("metric %s not found", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func TestSessionEndToEnd(t *testing.T) {
	s := startServer(t, "")
	var sess sessionView
	// Limits no pooled profile has: the session's own workspace,
	// sessions/<id> (one that takes a pooled sandbox keeps that sandbox's,
	// pool/<id>, depending on whether the pool is ready).
	resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"ttl_seconds": 600, "limits": map[string]any{"disk_bytes": 48 << 20}}, &sess)
	if resp.StatusCode != 201 || sess.State != "active" {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	ws := filepath.Join(s.DataDir, "workspaces", "sessions", sess.ID)
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the session's workspace: %v", err)
	}

	// bash writes a file; the next call (an in-process tool) reads it.
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "echo persisted > note.txt; id -u"}); j.State != "succeeded" {
		t.Fatalf("bash: %+v", j.Result)
	}
	if j := s.runIn(sess.ID, "read_file", map[string]any{"path": "note.txt"}); j.State != "succeeded" || !strings.Contains(j.Result.Content, "persisted") {
		t.Fatalf("read_file: %+v", j.Result)
	}
	// python_repl (the session's interpreter) reads the file bash wrote.
	if j := s.runIn(sess.ID, "python_repl", map[string]any{"code": "open('note.txt').read().strip()"}); !strings.Contains(j.Result.Content, "persisted") {
		t.Fatalf("python_repl: %+v", j.Result)
	}
	// files get returns it.
	code, body := s.raw("GET", "/v1/sessions/"+sess.ID+"/files/note.txt", nil, "")
	if code != 200 || string(body) != "persisted\n" {
		t.Fatalf("files get: %d %q", code, body)
	}
	// An uploaded file is writable by the sandbox user.
	if code, body := s.raw("PUT", "/v1/sessions/"+sess.ID+"/files/in/up.txt", []byte("uploaded"), "application/octet-stream"); code != 200 {
		t.Fatalf("files put: %d %s", code, body)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "cat in/up.txt && echo more >> in/up.txt"}); j.State != "succeeded" || !strings.Contains(j.Result.Content, "uploaded") {
		t.Fatalf("sandbox modifies the upload: %+v", j.Result)
	}

	// A tar with a ../evil entry is refused whole: nothing is written.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"good.txt", "../evil"} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
		tw.Write([]byte("evil"))
	}
	tw.Close()
	code, body = s.raw("POST", "/v1/sessions/"+sess.ID+"/archive?path=up", buf.Bytes(), "application/x-tar")
	if code != 400 {
		t.Fatalf("evil archive: %d %s", code, body)
	}
	for _, p := range []string{filepath.Join(ws, "up"), filepath.Join(ws, "evil"), filepath.Join(filepath.Dir(ws), "evil")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s exists after a refused archive", p)
		}
	}
	// A good archive lands and the sandbox sees it.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "pkg/mod.py", Typeflag: tar.TypeReg, Mode: 0o644, Size: 7})
	tw.Write([]byte("X = 42\n"))
	tw.Close()
	if code, body := s.raw("POST", "/v1/sessions/"+sess.ID+"/archive?path=src", buf.Bytes(), "application/x-tar"); code != 200 {
		t.Fatalf("archive: %d %s", code, body)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "cat src/pkg/mod.py"}); !strings.Contains(j.Result.Content, "X = 42") {
		t.Fatalf("archive content: %+v", j.Result)
	}

	if s.metric("sandboxd_sessions_active") != 1 {
		t.Fatal("sessions_active != 1")
	}
	// Delete: the workspace is gone.
	resp, data = s.do("DELETE", "/v1/sessions/"+sess.ID, "", nil, &sess)
	if resp.StatusCode != 200 || sess.State != "closed" {
		t.Fatalf("delete: %d %s", resp.StatusCode, data)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace after delete: %v", err)
	}
	if resp, _ := s.do("POST", "/v1/jobs", "", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "true"}, "session_id": sess.ID}, nil); resp.StatusCode != 409 {
		t.Fatalf("job in a closed session: %d", resp.StatusCode)
	}
}

func TestSessionLostAfterCrash(t *testing.T) {
	s := startServer(t, "")
	var sess sessionView
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	s.stop(9)
	s.start()
	s.do("GET", "/v1/sessions/"+sess.ID, "", nil, &sess)
	if sess.State != "closed" || sess.Reason != "lost" {
		t.Fatalf("after crash: %+v", sess)
	}
}

func TestPooledOneShotJobs(t *testing.T) {
	s := startServer(t, "pool:\n  size: 2\n")
	waitMetric := func(name string, want float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for s.metric(name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", name, s.metric(name), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitMetric("sandboxd_sandboxes_alive", 2)
	for i := range 4 {
		j := s.run("", "bash", map[string]any{"command": "pwd; ls -A | wc -l"})
		if j.State != "succeeded" || !strings.Contains(j.Result.Content, "/workspace\n0") {
			t.Fatalf("pooled job %d: %+v", i, j.Result)
		}
		waitMetric("sandboxd_sandboxes_alive", 2) // refilled, the used one destroyed
	}
	if hits := s.metric("sandboxd_pool_hits_total"); hits < 1 {
		t.Fatalf("pool hits = %v", hits)
	}
	waitMetric("sandboxd_pool_ready", 2)
}
