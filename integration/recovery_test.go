//go:build integration

package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCrashRecovery kills sandboxd with SIGKILL while one job runs and others
// wait in the queue, restarts it on the same data dir and checks that every
// job reaches a terminal state and that no sandbox of the dead process is
// left on the host.
func TestCrashRecovery(t *testing.T) {
	s := startServer(t, `
queue:
  size: 16
  workers: 1
`)
	running := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "setsid sleep 977 & sleep 977"}})
	s.waitState(running, "running", 20*time.Second)
	var queued []string
	for i := 0; i < 3; i++ {
		queued = append(queued, s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo queued-ran"}}))
	}
	// The job is marked running just before its sandbox starts the command.
	deadline := time.Now().Add(10 * time.Second)
	for countProcs("sleep 977") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the running job's processes are not visible before the crash")
		}
		time.Sleep(20 * time.Millisecond)
	}

	s.stop(syscall.SIGKILL)
	s.start()

	j := s.waitTerminal(running, 30*time.Second)
	if j.State != "failed" || j.Reason != "lost" {
		t.Fatalf("running job after crash: state %s reason %q, want failed/lost", j.State, j.Reason)
	}
	for _, id := range queued {
		j := s.waitTerminal(id, 60*time.Second)
		if j.State != "succeeded" || j.Result == nil || !strings.Contains(j.Result.Content, "queued-ran") {
			t.Fatalf("queued job %s after crash: %+v", id, j)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for countProcs("sleep 977") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("sandbox processes of the killed sandboxd survived the restart")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// No sandbox state of the dead process remains.
	left, _ := filepath.Glob(filepath.Join(s.DataDir, "run", "*"))
	for _, p := range left {
		if strings.Contains(p, running) {
			t.Fatalf("state of the lost sandbox remains: %s", p)
		}
	}
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, "sandboxd", running)); err == nil {
			t.Fatalf("cgroup %s of the lost sandbox remains", ctrl)
		}
	}
}

func countProcs(pattern string) int {
	out, _ := exec.Command("pgrep", "-f", "^"+pattern).Output()
	return len(strings.Fields(string(out)))
}

func (s *server) submit(body map[string]any) string {
	s.t.Helper()
	var j jobView
	resp, data := s.do("POST", "/v1/jobs", "", body, &j)
	if resp.StatusCode != 202 || j.ID == "" {
		s.t.Fatalf("submit: %d %s", resp.StatusCode, data)
	}
	return j.ID
}

func (s *server) get(id string) jobView {
	var j jobView
	resp, data := s.do("GET", "/v1/jobs/"+id, "", nil, &j)
	if resp.StatusCode != 200 {
		s.t.Fatalf("get %s: %d %s", id, resp.StatusCode, data)
	}
	return j
}

func (s *server) waitState(id, state string, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s.get(id).State == state {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("job %s never reached %s", id, state)
}

func (s *server) waitTerminal(id string, d time.Duration) jobView {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		j := s.get(id)
		switch j.State {
		case "succeeded", "failed", "cancelled":
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s still %s", id, j.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrashDuringFlood kills sandboxd with SIGKILL while concurrent
// clients flood it with calculator and bash jobs (the store group-commits
// their records), restarts it and checks the durability promise: every
// job a client saw accepted is in the store and ends terminal, and none
// that may have started ran again (attempts stays 1; one running at the
// crash ends failed/lost).
func TestCrashDuringFlood(t *testing.T) {
	s := startServer(t, `
queue:
  size: 1000
  workers: 4
pool:
  size: 0
`)
	var mu sync.Mutex
	var accepted []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := `{"tool":"calculator","arguments":{"expression":"1+2"}}`
				if (c+i)%4 == 0 {
					body = `{"tool":"bash","arguments":{"command":"sleep 0.2; echo ran"}}`
				}
				resp, err := client.Post(s.URL+"/v1/jobs", "application/json", strings.NewReader(body))
				if err != nil {
					return // the daemon is gone: an unanswered submit may or may not exist
				}
				var j jobView
				err = json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				if resp.StatusCode == 202 && err == nil && j.ID != "" {
					mu.Lock()
					accepted = append(accepted, j.ID)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	s.stop(syscall.SIGKILL)
	close(stop)
	wg.Wait()
	if len(accepted) < 20 {
		t.Fatalf("only %d jobs accepted before the crash", len(accepted))
	}
	s.start()
	var lost, ran int
	for _, id := range accepted {
		j := s.waitTerminal(id, 2*time.Minute)
		var full struct {
			Attempts int `json:"attempts"`
		}
		s.do("GET", "/v1/jobs/"+id, "", nil, &full)
		switch {
		case full.Attempts > 1:
			t.Errorf("job %s ran %d times (%s %s)", id, full.Attempts, j.State, j.Reason)
		case j.State == "failed" && j.Reason == "lost":
			lost++
		case j.State == "succeeded":
			ran++
		default:
			t.Errorf("job %s after the crash: %s %s %+v", id, j.State, j.Reason, j.Result)
		}
	}
	t.Logf("%d accepted before the crash: %d succeeded, %d lost (running at the crash)", len(accepted), ran, lost)
}
