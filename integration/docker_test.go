//go:build integration

package integration

import (
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

func TestDockerSessionThroughAPI(t *testing.T) {
	needDocker(t)
	checkSessionREPL(t, startServer(t, dockerConfig("")))
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
	// Only this server's containers count: another sandboxd may share
	// the daemon.
	pid := s.cmd.Process.Pid
	if err := waitMetric(s.MetricsURL, "sandboxd_pool_ready{", func(v float64) bool { return v >= 1 }); err != nil {
		t.Fatal(err)
	}
	if len(containersOf(t, "docker", pid)) == 0 {
		t.Fatal("no pooled containers while sandboxd runs")
	}
	// kill -9 and restart: the new process removes every container of the
	// old one (and pre-warms its own pool).
	s.stop(9)
	s.start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		stale := containersOf(t, "docker", pid)
		if len(stale) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d containers of the killed sandboxd remain", len(stale))
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
