//go:build integration

package integration

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// socketProxy forwards a unix socket of the test's to the real Docker
// socket until kill: then the "daemon" is down for whoever uses the
// proxy's address (the shared dockerd is never touched).
type socketProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func newSocketProxy(t testing.TB, target string) (*socketProxy, string) {
	t.Helper()
	path := filepath.Join(shortDir(t), "d.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &socketProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.dead {
				p.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.kill)
	return p, path
}

// kill closes the socket and every connection through it.
func (p *socketProxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// A runner outage (the Docker daemon behind the runner's socket gone) is a
// 503 with Retry-After naming the daemon for a session, and a job failing
// for it has reason unavailable with the cause in its result, not a 500
// internal.
func TestRunnerOutage(t *testing.T) {
	needDocker(t)
	proxy, sock := newSocketProxy(t, "/var/run/docker.sock")
	s := startServer(t, dockerConfig("    host: unix://"+sock+"\npool:\n  size: 0\n"))
	if j := s.run("", "python_repl", map[string]any{"code": "print(1)"}); j.State != "succeeded" {
		t.Fatalf("before the outage: %s/%s", j.State, j.Reason)
	}
	proxy.kill()

	resp, body := s.do("POST", "/v1/sessions", "", map[string]any{}, nil)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, sock) {
		t.Fatalf("session with the daemon down: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	j := s.run("", "python_repl", map[string]any{"code": "print(1)"})
	if j.State != "failed" || j.Reason != "unavailable" || j.Result == nil || !strings.Contains(j.Result.Error, sock) {
		t.Fatalf("job with the daemon down: %s/%s %+v", j.State, j.Reason, j.Result)
	}
	t.Logf("session: %s; job: %s", e.Error.Message, j.Result.Error)
}

// shortDir is a temp dir with a short path (unix socket paths: 108 bytes).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// A full host disk (the data dir on a small filesystem of the test's,
// filled up) is a 503 disk_full with Retry-After naming the cause, for a
// session and for a job (neither can be recorded), not a 500 internal.
func TestHostDiskFull(t *testing.T) {
	dir := shortDir(t)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	a := freeAddrs(t, 2)
	s := &server{t: t, DataDir: dir, addr: a[0], metrics: a[1]}
	s.start()
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		s.releaseWorkspaces()
	})
	// Fill the disk.
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	resp, body := s.do("POST", "/v1/sessions", "", map[string]any{}, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"disk_full"`) {
		t.Fatalf("session on a full disk: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// A job cannot even be recorded: the submit is the same 503.
	resp, body = s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": "print(1)"}}, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"disk_full"`) ||
		!strings.Contains(string(body), "no space left on the host's disk") {
		t.Fatalf("job on a full disk: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
