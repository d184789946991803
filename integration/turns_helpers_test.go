//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// turnView is the answer of POST /v1/tool-calls the tests read.
type turnView struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Dialect  string            `json:"dialect"`
	Mode     string            `json:"mode"`
	Messages []json.RawMessage `json:"messages"`
	Text     *string           `json:"text"`
	Final    *string           `json:"final_answer"`
	Effects  map[string]int    `json:"effects"`
	Calls    []struct {
		CallID    string `json:"call_id"`
		Generated bool   `json:"call_id_generated"`
		Tool      string `json:"tool"`
		JobID     string `json:"job_id"`
		State     string `json:"state"`
		Reason    string `json:"reason"`
		OK        bool   `json:"ok"`
		Error     string `json:"error"`
		Attempts  int    `json:"attempts"`
		Content   string `json:"content"`
		IsError   bool   `json:"is_error"`
		Details   []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"details"`
		Artifacts []struct {
			Name     string `json:"name"`
			MimeType string `json:"mime_type"`
			Size     int64  `json:"size"`
			URL      string `json:"url"`
		} `json:"artifacts"`
		StartedAt  *time.Time `json:"started_at"`
		FinishedAt *time.Time `json:"finished_at"`
	} `json:"calls"`
}

// postTurn sends one turn body (JSON or text) and decodes the batch.
func (s *server) postTurn(key, query, body string, headers ...string) (int, turnView, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/tool-calls"+query, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if strings.HasPrefix(strings.TrimSpace(body), "{") || strings.HasPrefix(strings.TrimSpace(body), "[") {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header.Set("Content-Type", "text/plain")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var tv turnView
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(data, &tv); err != nil {
			s.t.Fatalf("decode %s: %v", data, err)
		}
	}
	return resp.StatusCode, tv, data
}

// getTurn reads a batch with ?wait=.
func (s *server) getTurn(key, id, wait string) (int, turnView) {
	s.t.Helper()
	var tv turnView
	resp, data := s.do("GET", "/v1/tool-calls/"+id+"?wait="+wait, key, nil, &tv)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("GET batch %s: %d %s", id, resp.StatusCode, data)
	}
	return resp.StatusCode, tv
}

var (
	mcpOnce sync.Once
	mcpBin  string
	mcpErr  error
)

// mcpTestServer builds cmd/mcp-testserver (static: it runs inside
// sandboxes) once and returns its path.
func mcpTestServer(t *testing.T) string {
	t.Helper()
	mcpOnce.Do(func() {
		mcpBin = filepath.Join(filepath.Dir(binPath), "mcp-testserver")
		cmd := exec.Command("go", "build", "-o", mcpBin, "../cmd/mcp-testserver")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpErr = fmt.Errorf("build mcp-testserver: %v\n%s", err, out)
		}
	})
	if mcpErr != nil {
		t.Fatal(mcpErr)
	}
	return mcpBin
}

// providerDir is a workspace holding the MCP test server, readable by the
// sandbox user.
func providerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(mcpTestServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mcp-testserver"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// procs lists the processes descending from root: pid → command line.
func descendants(root int) map[int]string {
	parent := map[int]int{}
	cmdline := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		rest := stat[bytes.LastIndexByte(stat, ')')+2:]
		f := strings.Fields(string(rest))
		if len(f) < 2 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmdline[pid] = strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '})))
	}
	out := map[int]string{}
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out[pid] = cmdline[pid]
				break
			}
		}
	}
	return out
}

// waitProc waits until a descendant of root matches and returns its pid.
func waitProc(t *testing.T, root int, match func(cmdline string) bool) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for pid, cl := range descendants(root) {
			if match(cl) {
				return pid
			}
		}
	}
	t.Fatalf("no process of sandboxd %d matched", root)
	return 0
}

// parentOf returns a process's parent pid.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	p, _ := strconv.Atoi(f[1])
	return p
}

// overlaps counts the pairs of calls whose [started, finished] intervals
// overlap: only calls running at the same time can.
func overlaps(tv turnView) int {
	n := 0
	for i := range tv.Calls {
		for j := i + 1; j < len(tv.Calls); j++ {
			a, b := tv.Calls[i], tv.Calls[j]
			if a.StartedAt == nil || b.StartedAt == nil || a.FinishedAt == nil || b.FinishedAt == nil {
				continue
			}
			if a.StartedAt.Before(*b.FinishedAt) && b.StartedAt.Before(*a.FinishedAt) {
				n++
			}
		}
	}
	return n
}
