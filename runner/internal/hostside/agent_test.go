package hostside

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DialAgent gives up as soon as the watcher reports the sandbox gone, and
// says why; without a report it gives up after its timeout.
func TestDialAgentGivesUp(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "agent.sock") // nobody listens
	start := time.Now()
	_, err := DialAgent(t.Context(), sock, time.Minute, func(ctx context.Context, stop func(error)) {
		stop(errors.New("task exited with 3"))
	})
	if err == nil || !strings.Contains(err.Error(), "task exited with 3") || time.Since(start) > 30*time.Second {
		t.Fatalf("DialAgent = %v after %v, want the watcher's cause at once", err, time.Since(start))
	}
	_, err = DialAgent(t.Context(), sock, 200*time.Millisecond, func(ctx context.Context, stop func(error)) { <-ctx.Done() })
	if err == nil || !strings.Contains(err.Error(), "agent start timeout") {
		t.Fatalf("DialAgent = %v, want the start timeout", err)
	}
}

func TestCompleteConfig(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "sandbox-agent")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	agentPath, stateDir, id := bin, "", ""
	if err := CompleteConfig("docker", &agentPath, &stateDir, &id); err != nil {
		t.Fatal(err)
	}
	if stateDir != filepath.Join(os.TempDir(), "sandboxd-docker") || !ValidID(id) {
		t.Fatalf("defaults: state dir %q, id %q", stateDir, id)
	}
	for _, tc := range []struct{ agent, id, want string }{
		{"", "", "containerd: AgentPath is required"},
		{filepath.Dir(bin), "", "is not a regular file"},
		{bin, "bad id!", `containerd: InstanceID "bad id!"`},
	} {
		a, s, i := tc.agent, "", tc.id
		if err := CompleteConfig("containerd", &a, &s, &i); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CompleteConfig(%q, %q) = %v, want %q", tc.agent, tc.id, err, tc.want)
		}
	}
}

func TestStateDirClosedToTheCode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "sb")
	if err := MakeStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := VerifyStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := VerifyStateDir(dir); err == nil {
		t.Fatal("VerifyStateDir accepted mode 0755")
	}
}

func TestAgentArgs(t *testing.T) {
	got := strings.Join(AgentArgs(true), " ")
	want := "/usr/bin/env -i /run/sandboxd-agent/sandbox-agent --socket /run/sandboxd/agent.sock --root /workspace --uid 65534 --gid 65534 --egress-listen 127.0.0.1:3128 --egress-socket /run/sandboxd/egress.sock"
	if got != want {
		t.Errorf("AgentArgs(true) = %s\nwant %s", got, want)
	}
	if GVisorNProc(64) != 63 || GVisorNProc(1) != 1 {
		t.Errorf("GVisorNProc: %d %d", GVisorNProc(64), GVisorNProc(1))
	}
}
