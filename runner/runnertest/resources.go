package runnertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

func (s *suite) testOOM(t *testing.T) {
	s.need(t, s.caps.Cgroups, "memory limits (cgroups)")
	sb := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{MemoryBytes: 64 << 20}})
	res := s.py(t, sb, `chunks = []
for i in range(512):
    chunks.append(b"x" * (1 << 20))
print("allocated 512 MiB")`)
	if !res.OOMKilled {
		t.Fatalf("not OOM killed: %+v\nstdout %s\nstderr %s", res, res.Stdout, res.Stderr)
	}
	if strings.Contains(string(res.Stdout), "allocated") || res.ExitCode == 0 {
		t.Fatalf("allocation beyond the limit succeeded: %+v", res)
	}
	// The sandbox survives its OOM and reports a fresh one correctly.
	res = s.sh(t, sb, "echo alive")
	mustOK(t, res)
	if res.OOMKilled {
		t.Fatal("OOMKilled reported for a process that was not killed")
	}
	if res.Usage.PeakMemory <= 0 && s.caps.Cgroups {
		t.Errorf("no peak memory reported: %+v", res.Usage)
	}
}

func (s *suite) testPIDs(t *testing.T) {
	s.need(t, s.caps.Cgroups, "a pids limit (cgroups)")
	const limit = 64
	sb := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{PIDs: limit}})
	// Count how many processes can exist at once.
	res := s.py(t, sb, `import os, sys, time
n = 0
try:
    while n < 500:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed after", n, e.strerror)
    sys.stdout.flush()
    os._exit(0)
print("forked", n)
sys.stdout.flush()
os._exit(0)`)
	out := strings.Fields(string(res.Stdout))
	if len(out) < 4 || out[0] != "fork" {
		t.Fatalf("forks not bounded: %q %+v", res.Stdout, res)
	}
	if n, _ := strconv.Atoi(out[3]); n >= limit {
		t.Fatalf("forked %d processes with a limit of %d", n, limit)
	}
	if res.ForkLoop {
		t.Fatalf("a process that met its limit once and exited was killed as a fork loop: %+v", res)
	}
	// A fork bomb ends (timeout, exit or error), the sandbox stays usable
	// and nothing outlives it.
	tok := token()
	start := time.Now()
	bomb, err := sb.Exec(t.Context(), runner.Process{
		Args:    []string{"/bin/sh", "-c", "f() { sleep " + tok + " & f | f & }; f; wait"},
		Timeout: 3 * time.Second,
	})
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("fork bomb ran %v", el)
	}
	t.Logf("fork bomb: err=%v timedOut=%v exit=%d signal=%s", err, bomb.TimedOut, bomb.ExitCode, bomb.Signal)
	waitNoProcs(t, tok, 10*time.Second)
	mustOK(t, s.sh(t, sb, "echo recovered"))
}

// GVisorKnownGaps are the subtests gVisor backends skip, with the reason;
// Factory.KnownGaps of runsc backends.
var GVisorKnownGaps = map[string]string{
	"ForkLoopKilled": "the Sentry refuses forks over the limit itself (RLIMIT_NPROC) and never creates host tasks for the code, so the host's pids cgroup does not see a fork loop and it runs to its timeout; " +
		"it spends only its own CPU share there (no host fork, so no host-wide stall)",
}

// testForkLoop: a process that keeps forking at its pids limit (a fork
// bomb retrying refused forks) stalls process creation for everyone on the
// host, limit or not; it is killed well before its timeout, the result
// says why, nothing of it survives and the sandbox stays usable.
func (s *suite) testForkLoop(t *testing.T) {
	s.need(t, s.caps.Cgroups, "a pids limit (cgroups)")
	sb := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{PIDs: 64}})
	tok := token()
	start := time.Now()
	res, err := sb.Exec(t.Context(), runner.Process{
		Args:    []string{s.f.Python, "-c", "import os\n# " + tok + "\nwhile True:\n    try: os.fork()\n    except OSError: pass"},
		Timeout: 30 * time.Second,
	})
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ForkLoop || res.Signal != "SIGKILL" || res.TimedOut || res.OOMKilled {
		t.Fatalf("after %v: %+v, want killed as a fork loop", el, res)
	}
	if el > 10*time.Second {
		t.Fatalf("a fork loop ran %v", el)
	}
	t.Logf("fork loop killed after %v", el)
	waitNoProcs(t, tok, 10*time.Second)
	res = s.sh(t, sb, "echo recovered")
	mustOK(t, res)
	if res.ForkLoop {
		t.Fatalf("a later process reported as a fork loop: %+v", res)
	}
}

func (s *suite) killsDaemons() bool { return s.f.KillsDaemons || s.caps.PIDNamespace }

func (s *suite) testDaemons(t *testing.T) {
	s.need(t, s.killsDaemons(), "killing daemonised children")
	sb := s.sandbox(t, runner.SandboxSpec{})
	tok1, tok2 := token(), token()+"1"
	res := s.sh(t, sb, fmt.Sprintf(`setsid sleep %s </dev/null >/dev/null 2>&1 &
nohup sleep %s </dev/null >/dev/null 2>&1 &
sleep 0.2; echo started`, tok1, tok2))
	mustOK(t, res)
	waitNoProcs(t, tok1, 5*time.Second)
	waitNoProcs(t, tok2, 5*time.Second)

	// A daemon started by a command that is then cancelled dies too.
	tok3 := token() + "3"
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := sb.Exec(ctx, runner.Process{Args: []string{"/bin/sh", "-c", fmt.Sprintf("setsid sleep %s </dev/null >/dev/null 2>&1 & sleep 30", tok3)}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	waitNoProcs(t, tok3, 5*time.Second)
}

func (s *suite) testTrapTerm(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	tok := token()
	start := time.Now()
	res, err := sb.Exec(t.Context(), runner.Process{
		Args:    []string{"/bin/sh", "-c", "trap '' TERM INT HUP; sleep " + tok + "; echo survived"},
		Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	if !res.TimedOut || strings.Contains(string(res.Stdout), "survived") {
		t.Fatalf("got %+v", res)
	}
	waitNoProcs(t, tok, 5*time.Second)
}

func (s *suite) testClose(t *testing.T) {
	ws := workspace(t)
	sb, err := s.r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()
	if id == "" {
		t.Fatal("empty sandbox ID")
	}
	mustOK(t, s.sh(t, sb, "echo x > f"))
	// Close while an Exec (with a daemon) is running kills it.
	tok := token()
	script, want := "exec sleep "+tok, 1
	if s.killsDaemons() {
		script, want = fmt.Sprintf("setsid sleep %s </dev/null >/dev/null 2>&1 & sleep %s", tok, tok), 2
	}
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), runner.Process{Args: []string{"/bin/sh", "-c", script}})
		done <- err
	}()
	// Sandbox processes may not be host processes (gVisor: tasks of its
	// Sentry); then the sandbox itself shows them.
	procs := func() int {
		if n := len(hostProcsMatching(tok)); n > 0 {
			return n
		}
		res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f"; echo; done`}})
		if err != nil {
			return 0
		}
		n := 0
		for _, line := range strings.Split(string(res.Stdout), "\n") {
			if strings.TrimSpace(line) == "sleep "+tok {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for procs() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := procs(); n < want {
		t.Fatalf("%d test processes started, want %d", n, want)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running 10s after Close")
	}
	waitNoProcs(t, tok, 5*time.Second)
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sb.Exec(t.Context(), runner.Process{Args: []string{"true"}}); !errors.Is(err, runner.ErrClosed) {
		t.Fatalf("Exec after Close: %v, want ErrClosed", err)
	}
	s.checkLeftovers(t, id)
}
