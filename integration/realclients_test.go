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

// TestRealClients runs agent loops written with the official openai and
// @anthropic-ai/sdk npm packages (TypeScript, type-checked by tsc) against
// a stand-in model server they start on loopback, with sandboxd executing
// every turn's tool calls: Chat Completions, Responses and Messages. The
// stand-in checks every tool answer against the SDK's request types and
// the call ids it issued; a run that tampers with one id must fail.
// node_modules is installed here on the first run and kept (never in git).
func TestRealClients(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("SANDBOXD_REQUIRE_NODE") != "" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found (SANDBOXD_REQUIRE_NODE makes this fail)", tool)
		}
	}
	dir, err := filepath.Abs("realclients")
	if err != nil {
		t.Fatal(err)
	}
	run := func(env []string, name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	stamp := filepath.Join(dir, "node_modules", ".sandboxd-installed")
	pkg, _ := os.Stat(filepath.Join(dir, "package.json"))
	if st, err := os.Stat(stamp); err != nil || st.ModTime().Before(pkg.ModTime()) {
		start := time.Now()
		if out, err := run(nil, "npm", "install", "--no-audit", "--no-fund"); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
		os.WriteFile(stamp, nil, 0o644)
		t.Logf("npm install took %s", time.Since(start).Round(time.Millisecond))
	}
	if out, err := run(nil, filepath.Join(dir, "node_modules", ".bin", "tsc"), "-p", "."); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	s := startServer(t, "")
	out, err := run([]string{"SANDBOXD_URL=" + s.URL}, "node", "dist/agent.js")
	if err != nil {
		t.Fatalf("agent loops: %v\n%s", err, out)
	}
	for _, want := range []string{"chat: done: 90 | 1024 | from-bash", "responses: done: 90 | 1024 | from-bash",
		"anthropic: done: 90 | 1024 | from-bash", "checked 9 tool answers"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run([]string{"SANDBOXD_URL=" + s.URL, "TAMPER=1"}, "node", "dist/agent.js")
	if err == nil || !strings.Contains(out, "call_tampered, which was never issued") {
		t.Errorf("a tampered call id was not refused by the stand-in: %v\n%s", err, out)
	}
}
