//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// dockerConfig runs sandboxd on the Docker runner with the agent built by
// TestMain; extra adds top-level keys (default: a warm pool of 2).
func dockerConfig(extra string) string {
	if extra == "" {
		extra = "pool:\n  size: 2\n"
	}
	return fmt.Sprintf(`
runner:
  name: docker
  docker:
    agent_path: %s
    image: sandboxd/python:latest
`, agentPath) + extra
}

func needDocker(t testing.TB) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Fatalf("dockerd is not running (scripts/docker-setup.sh starts it): %v", err)
	}
}

// dockerContainers counts the containers sandboxd manages.
func dockerContainers(t testing.TB) []string {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=sandboxd.managed=true").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

func TestDockerSessionThroughAPI(t *testing.T) {
	needDocker(t)
	s := startServer(t, dockerConfig(""))

	var ses struct {
		ID      string   `json:"id"`
		State   string   `json:"state"`
		Effects []string `json:"effects"`
	}
	resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses)
	if resp.StatusCode != 201 || ses.ID == "" {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	call := func(tool string, args map[string]any) jobView {
		t.Helper()
		var j jobView
		resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": tool, "arguments": args, "session_id": ses.ID}, &j)
		if resp.StatusCode != 200 || j.Result == nil {
			t.Fatalf("%s in session: %d %s", tool, resp.StatusCode, data)
		}
		return j
	}
	// State persists in one interpreter; the trailing expression is the value.
	call("python_repl", map[string]any{"code": "import numpy as np\nacc = np.arange(10)"})
	j := call("python_repl", map[string]any{"code": "int(acc.sum())"})
	if !j.Result.OK || !strings.Contains(j.Result.Content, "45") {
		t.Fatalf("REPL state did not persist: %+v", j.Result)
	}
	j = call("python_repl", map[string]any{"code": "undefined_name"})
	if j.Result.OK || !strings.Contains(j.Result.Content+j.Result.Error, "NameError") {
		t.Fatalf("exception should be a failed result with a traceback: %+v", j.Result)
	}
	// A matplotlib figure becomes a PNG artifact (for the program, not the model).
	j = call("python_repl", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"})
	if !j.Result.OK || len(j.Result.Artifacts) != 1 || j.Result.Artifacts[0].MimeType != "image/png" ||
		len(j.Result.Artifacts[0].Data) != 0 || j.Result.Artifacts[0].URL == "" {
		t.Fatalf("matplotlib figure: ok=%v artifacts=%+v content=%q error=%q", j.Result.OK, j.Result.Artifacts, j.Result.Content, j.Result.Error)
	}
	if code, png := s.raw("GET", j.Result.Artifacts[0].URL, nil, ""); code != 200 || !bytes.HasPrefix(png, []byte("\x89PNG")) ||
		int64(len(png)) != j.Result.Artifacts[0].Size {
		t.Fatalf("GET %s: %d, %d bytes", j.Result.Artifacts[0].URL, code, len(png))
	}
	// A runaway cell is interrupted by its timeout; the session keeps its state.
	j = call("python_repl", map[string]any{"code": "while True: pass", "timeout_seconds": 1})
	if j.Result.OK || j.Reason != "timeout" || !strings.Contains(j.Result.Error, "timed out") {
		t.Fatalf("runaway cell: reason %q result %+v", j.Reason, j.Result)
	}
	j = call("python_repl", map[string]any{"code": "int(acc.sum())"})
	if !j.Result.OK || !strings.Contains(j.Result.Content, "45") {
		t.Fatalf("state lost after an interrupted cell: %+v", j.Result)
	}
	// Files written by one call are read by the next.
	call("bash", map[string]any{"command": "echo from-bash > note.txt"})
	j = call("read_file", map[string]any{"path": "note.txt"})
	if !strings.Contains(j.Result.Content, "from-bash") {
		t.Fatalf("read_file after bash: %+v", j.Result)
	}
	// An effect the session lacks is refused.
	resp, data = s.do("POST", "/v1/jobs", "", map[string]any{"tool": "http_request", "arguments": map[string]any{"url": "http://127.0.0.1:1/"}, "session_id": ses.ID}, nil)
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || !strings.Contains(string(data), "http") {
		t.Fatalf("http_request in a session without http: %d %s", resp.StatusCode, data)
	}
	resp, _ = s.do("DELETE", "/v1/sessions/"+ses.ID, "", nil, nil)
	if resp.StatusCode >= 300 {
		t.Fatalf("delete session: %d", resp.StatusCode)
	}
}

func TestDockerOneShotAndReconcile(t *testing.T) {
	needDocker(t)
	s := startServer(t, dockerConfig(""))
	j := s.run("", "python_repl", map[string]any{"code": "import os\nprint(os.getuid())\nopen('/etc/x', 'w')"})
	if j.Result.OK || !strings.Contains(j.Result.Content+j.Result.Error, "Read-only file system") || !strings.Contains(j.Result.Content, "65534") {
		t.Fatalf("one-shot python in docker: %+v", j.Result)
	}
	j = s.run("", "bash", map[string]any{"command": "python3 -c \"import socket; socket.socket(socket.AF_INET)\""})
	if j.Result.OK || !strings.Contains(j.Result.Process.Stderr, "PermissionError") {
		t.Fatalf("inet socket without http: %+v", j.Result)
	}
	if len(dockerContainers(t)) == 0 {
		t.Fatal("no pooled containers while sandboxd runs")
	}
	// kill -9 and restart: the new process removes every container of the
	// old one (and pre-warms its own pool).
	before := dockerContainers(t)
	s.stop(9)
	s.start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := dockerContainers(t)
		stale := 0
		for _, id := range before {
			for _, n := range now {
				if n == id {
					stale++
				}
			}
		}
		if stale == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d containers of the killed sandboxd remain", stale)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDockerFiftySessions runs 50 concurrent sessions, one REPL call each.
func TestDockerFiftySessions(t *testing.T) {
	needDocker(t)
	s := startServer(t, dockerConfig(`
sessions:
  max_per_tenant: 60
pool:
  size: 2
  max_sandboxes: 80
`))
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id, err := createSession(ctx, s.URL)
			if err != nil {
				errs <- err
				return
			}
			defer deleteSession(s.URL, id)
			for k := 0; k < 3; k++ {
				if err := sessionCall(ctx, http.DefaultClient, s.URL, id, fmt.Sprintf("x%d = %d", k, i*k)); err != nil {
					errs <- fmt.Errorf("session %d: %w", i, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A request may ask for limits above the configured defaults, up to the
// ceilings, on the Docker runner too: the runner got the defaults as its
// own ceilings and clipped such a request to the default.
func TestDockerLimitsAboveDefault(t *testing.T) {
	needDocker(t)
	s := startServer(t, dockerConfig(`pool: {size: 0}
limits:
  defaults: {memory_bytes: 268435456, timeout: 2s}
`))
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{
		"tool":      "bash",
		"arguments": map[string]any{"command": "sleep 3; cat /sys/fs/cgroup/memory/memory.limit_in_bytes", "timeout_seconds": 10},
		"limits":    map[string]any{"memory_bytes": 536870912},
	}, &j)
	if resp.StatusCode != 200 || j.Result == nil {
		t.Fatalf("submit: %d %s", resp.StatusCode, data)
	}
	if !j.Result.OK || strings.TrimSpace(j.Result.Process.Stdout) != "536870912" {
		t.Fatalf("memory 512 MiB and a 10 s timeout asked (defaults 256 MiB, 2 s): ok %v, stdout %q, error %q",
			j.Result.OK, j.Result.Process.Stdout, j.Result.Error)
	}
}
