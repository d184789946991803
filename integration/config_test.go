//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A typo in the config file stops sandboxd at start (exit 2) with the
// closest valid key.
func TestConfigTypoNamesClosestKey(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sandboxd.yaml")
	if err := os.WriteFile(cfg, []byte("sessions:\n  max_tll: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 2)
	cmd := exec.Command(binPath, "serve", "--config", cfg, "--addr", addrs[0], "--metrics-addr", addrs[1], "--data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("serve with a typo: %v\n%s", err, out)
	}
	if want := `line 2: unknown key "sessions.max_tll" (did you mean "sessions.max_ttl"?)`; !strings.Contains(string(out), want) {
		t.Fatalf("output %q lacks %s", out, want)
	}
}

// timeout_seconds above the default runs to its end (it was killed at the
// default), and above the ceiling is a 400 naming the ceiling.
func TestConfigTimeoutRule(t *testing.T) {
	s := startServer(t, "limits:\n  defaults: {timeout: 1s}\n  ceilings: {timeout: 5s}\n")
	start := time.Now()
	j := s.run("", "bash", map[string]any{"command": "sleep 2; echo done", "timeout_seconds": 4})
	if !j.Result.OK || strings.TrimSpace(j.Result.Content) != "done" {
		t.Fatalf("timeout_seconds 4 over a 1s default: %s %s %+v (after %s)", j.State, j.Reason, j.Result, time.Since(start))
	}
	if j = s.run("", "bash", map[string]any{"command": "sleep 2; echo done"}); j.Reason != "timeout" {
		t.Fatalf("no timeout_seconds, 1s default: %s %s", j.State, j.Reason)
	}
	resp, data := s.do("POST", "/v1/jobs", "", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "true", "timeout_seconds": 6}}, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(data), "exceeds the ceiling 5") {
		t.Fatalf("timeout_seconds 6 over a 5s ceiling: %d %s", resp.StatusCode, data)
	}
	resp, data = s.do("POST", "/v1/jobs", "", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "true"}, "limits": map[string]any{"timeout_ms": 6000}}, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(data), "exceeds the ceiling 5s") {
		t.Fatalf("limits.timeout_ms 6000 over a 5s ceiling: %d %s", resp.StatusCode, data)
	}
}
