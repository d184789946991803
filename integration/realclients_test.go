//go:build integration

package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRealClients runs agent loops written with the official openai and
// @anthropic-ai/sdk npm packages (TypeScript, type-checked by tsc) against
// a stand-in model server they start on loopback, with sandboxd executing
// every turn's tool calls: Chat Completions, Responses and Messages. The
// stand-in checks every tool answer against the SDK's request types and
// the call ids it issued; a run that tampers with one id must fail.
// node_modules is installed here on the first run and kept (never in git).
func TestRealClients(t *testing.T) {
	dir := npmInstall(t, "realclients")
	run := func(env []string, name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
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
