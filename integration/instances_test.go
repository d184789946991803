//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestInstanceDataDirLocked: a second `sandboxd serve` on a live server's
// data dir (another port) exits at once, non-zero, naming the holder's pid,
// and touches nothing: the first server's running job finishes, its session
// and the session's workspace are intact.
func TestInstanceDataDirLocked(t *testing.T) {
	s := startServer(t, "")
	var sess sessionView
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "echo kept > note.txt"}); j.State != "succeeded" {
		t.Fatalf("bash in session: %+v", j.Result)
	}
	running := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 3; echo finished"}})
	s.waitState(running, "running", 20*time.Second)

	out, code := s.second(20 * time.Second)
	pid := strconv.Itoa(s.cmd.Process.Pid)
	if code == 0 || !strings.Contains(out, "pid "+pid) {
		t.Fatalf("second sandboxd on the same data dir: exit %d, want non-zero naming pid %s; output:\n%s", code, pid, out)
	}

	if j := s.waitTerminal(running, 30*time.Second); j.State != "succeeded" || !strings.Contains(j.Result.Content, "finished") {
		t.Fatalf("the first server's running job: %s/%s %+v", j.State, j.Reason, j.Result)
	}
	s.do("GET", "/v1/sessions/"+sess.ID, "", nil, &sess)
	if sess.State != "active" {
		t.Fatalf("the first server's session after the second start: %+v", sess)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "cat note.txt"}); j.State != "succeeded" || !strings.Contains(j.Result.Content, "kept") {
		t.Fatalf("the session's workspace after the second start: %+v", j.Result)
	}
}

// second runs another `sandboxd serve` on s's data dir and config, on
// another port, and returns its output and exit code; one that is still
// running after d is killed (code -1).
func (s *server) second(d time.Duration) (string, int) {
	s.t.Helper()
	args := []string{"serve", "--addr", freeAddr(s.t), "--data-dir", s.DataDir}
	if s.Config != "" {
		args = append(args, "--config", s.Config)
	}
	args = append(args, s.Args...)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String() + fmt.Sprintf("\n(still running after %v: killed)", d), -1
	}
	if err != nil && cmd.ProcessState == nil {
		s.t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// workspaceDirs lists the job, pool and session workspaces under s's data
// dir.
func (s *server) workspaceDirs() []string {
	s.t.Helper()
	var dirs []string
	root := filepath.Join(s.DataDir, "workspaces")
	for _, pattern := range []string{"job_*", "pool/*", "sessions/*"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			s.t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	return dirs
}

var _ = os.Getpid
