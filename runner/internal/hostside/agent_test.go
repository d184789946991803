package hostside

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
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
	fields := func(agent, state, id *string, def *runner.Limits, tmp *int64) ConfigFields {
		var iv time.Duration
		var log *slog.Logger
		return ConfigFields{AgentPath: agent, StateDir: state, InstanceID: id, Defaults: def, TmpBytes: tmp, ReconcileInterval: &iv, Logger: &log}
	}
	agentPath, stateDir, id := bin, "", ""
	var def runner.Limits
	var tmp int64
	f := fields(&agentPath, &stateDir, &id, &def, &tmp)
	if err := CompleteConfig("docker", f); err != nil {
		t.Fatal(err)
	}
	if stateDir != filepath.Join(os.TempDir(), "sandboxd-docker") || !ValidID(id) || def != DefaultLimits || tmp != 64<<20 ||
		*f.ReconcileInterval != 30*time.Second || *f.Logger == nil {
		t.Fatalf("defaults: state dir %q, id %q, limits %+v, tmp %d, interval %v", stateDir, id, def, tmp, *f.ReconcileInterval)
	}
	// The operator's configured limits (its ceilings) are kept, above the
	// built-in defaults too: only missing fields are filled.
	big := runner.Limits{MemoryBytes: 4 << 30, PIDs: 4096}
	a, s, i, tb := bin, "", "", int64(0)
	if err := CompleteConfig("docker", fields(&a, &s, &i, &big, &tb)); err != nil {
		t.Fatal(err)
	}
	if big.MemoryBytes != 4<<30 || big.PIDs != 4096 || big.CPUMillis != DefaultLimits.CPUMillis {
		t.Errorf("configured limits above the built-in defaults: got %+v", big)
	}
	for _, tc := range []struct {
		agent, id string
		def       runner.Limits
		tmp       int64
		want      string
	}{
		{"", "", runner.Limits{}, 0, "containerd: AgentPath is required"},
		{filepath.Dir(bin), "", runner.Limits{}, 0, "is not a regular file"},
		{bin, "bad id!", runner.Limits{}, 0, `containerd: InstanceID "bad id!"`},
		{bin, "", runner.Limits{}, -1, "containerd: TmpBytes -1 is negative"},
		{bin, "", runner.Limits{PIDs: -1}, 0, "containerd: Defaults: limit pids = -1 is negative"},
	} {
		a, s, i, d, tb := tc.agent, "", tc.id, tc.def, tc.tmp
		if err := CompleteConfig("containerd", fields(&a, &s, &i, &d, &tb)); err == nil || !strings.Contains(err.Error(), tc.want) {
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
