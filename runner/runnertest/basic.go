package runnertest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

func (s *suite) testEcho(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.exec(t, sb, runner.Process{Args: []string{"echo", "hello", "world"}})
	mustOK(t, res)
	if string(res.Stdout) != "hello world\n" || len(res.Stderr) != 0 {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if res.Duration <= 0 {
		t.Errorf("Duration %v", res.Duration)
	}
	res = s.sh(t, sb, "echo out; echo err >&2")
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	res = s.exec(t, sb, runner.Process{Args: []string{"/nonexistent/binary"}})
	if res.ExitCode == 0 {
		t.Fatalf("missing binary exited 0")
	}
}

func (s *suite) testStdin(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	in := strings.Repeat("line of input\n", 10000)
	res := s.exec(t, sb, runner.Process{Args: []string{"cat"}, Stdin: strings.NewReader(in)})
	mustOK(t, res)
	if string(res.Stdout) != in {
		t.Fatalf("cat returned %d bytes, want %d", len(res.Stdout), len(in))
	}
	// No stdin: reads see EOF at once.
	res = s.exec(t, sb, runner.Process{Args: []string{"cat"}, Timeout: 5 * time.Second})
	mustOK(t, res)
	if len(res.Stdout) != 0 {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func (s *suite) testEnv(t *testing.T) {
	// The test process's own environment (HOME, PATH, GO*...) is the canary:
	// none of it may appear.
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.exec(t, sb, runner.Process{Args: []string{"/usr/bin/env"}, Env: []string{"FOO=bar", "PATH=/usr/bin:/bin", "EMPTY="}})
	mustOK(t, res)
	got := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	slices.Sort(got)
	want := []string{"EMPTY=", "FOO=bar", "PATH=/usr/bin:/bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("env = %q, want exactly %q", got, want)
	}
	// Without PATH the runner may add a default PATH, nothing else.
	res = s.exec(t, sb, runner.Process{Args: []string{"/usr/bin/env"}, Env: []string{"A=1"}})
	mustOK(t, res)
	for _, kv := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if kv != "A=1" && !strings.HasPrefix(kv, "PATH=") {
			t.Errorf("unexpected variable %q", kv)
		}
	}
}

func (s *suite) testExitCodes(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	for _, code := range []int{0, 1, 2, 42, 127, 255} {
		res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", "exit " + strconv.Itoa(code)}})
		if err != nil {
			t.Fatalf("exit %d: error %v (exit codes are data)", code, err)
		}
		if res.ExitCode != code || res.Signal != "" || res.TimedOut || res.OOMKilled {
			t.Errorf("exit %d: got %+v", code, res)
		}
	}
}

func (s *suite) testSignal(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.sh(t, sb, "kill -TERM $$; sleep 5")
	if res.Signal != "SIGTERM" || res.ExitCode == 0 || res.TimedOut {
		t.Fatalf("got signal %q exit %d timedOut %v", res.Signal, res.ExitCode, res.TimedOut)
	}
	res = s.sh(t, sb, "kill -KILL $$; sleep 5")
	if res.Signal != "SIGKILL" || res.TimedOut || res.OOMKilled {
		t.Fatalf("got %+v", res)
	}
}

func (s *suite) testTimeout(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	start := time.Now()
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("timeout is a result, got error %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	if !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode == 0 {
		t.Fatalf("got %+v", res)
	}
	if res.Duration < 400*time.Millisecond {
		t.Errorf("Duration %v shorter than the timeout", res.Duration)
	}
	// The sandbox default timeout applies when the process sets none.
	sb2 := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{Timeout: 300 * time.Millisecond}})
	res = s.exec(t, sb2, runner.Process{Args: []string{"sleep", "30"}})
	if !res.TimedOut {
		t.Fatalf("Limits.Timeout ignored: %+v", res)
	}
	// And the sandbox is usable afterwards.
	mustOK(t, s.sh(t, sb, "true"))
}

func (s *suite) testCancel(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	tok := token()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := sb.Exec(ctx, runner.Process{Args: []string{"/bin/sh", "-c", "sleep " + tok + "; echo survived"}})
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("cancel took %v", el)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if strings.Contains(string(res.Stdout), "survived") {
		t.Fatal("process survived cancellation")
	}
	waitNoProcs(t, tok, 5*time.Second)
	// A cancelled context before Exec runs nothing.
	if _, err := sb.Exec(ctx, runner.Process{Args: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec with cancelled ctx: %v", err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuf) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Len()
}

func (s *suite) testOutputCap(t *testing.T) {
	const limit = 1000
	sb := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{OutputBytes: limit}})
	live := &syncBuf{}
	script := `import sys
sys.stdout.write("HEAD" + "x" * 200000 + "TAIL\n")
sys.stderr.write("small\n")`
	res := s.exec(t, sb, runner.Process{Args: []string{s.f.Python, "-c", script}, Stdout: live, Timeout: 30 * time.Second})
	mustOK(t, res)
	if !res.StdoutTruncated || res.StderrTruncated {
		t.Fatalf("truncated stdout %v stderr %v", res.StdoutTruncated, res.StderrTruncated)
	}
	if !bytes.HasPrefix(res.Stdout, []byte("HEAD")) || !bytes.HasSuffix(res.Stdout, []byte("TAIL\n")) {
		t.Fatalf("head/tail not kept: %q...%q", res.Stdout[:min(20, len(res.Stdout))], res.Stdout[max(0, len(res.Stdout)-20):])
	}
	if len(res.Stdout) > limit+100 {
		t.Fatalf("captured %d bytes, cap %d", len(res.Stdout), limit)
	}
	if string(res.Stderr) != "small\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
	if live.Len() != 200009 {
		t.Fatalf("live writer got %d bytes, want the full 200009", live.Len())
	}
}

func (s *suite) testFDs(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.py(t, sb, `import os
open_fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
print(open_fds)`)
	mustOK(t, res)
	if strings.TrimSpace(string(res.Stdout)) != "[]" {
		t.Fatalf("inherited descriptors beyond 0-2: %s", res.Stdout)
	}
}

func (s *suite) testInvalid(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	if _, err := sb.Exec(t.Context(), runner.Process{}); !errors.Is(err, runner.ErrInvalidSpec) {
		t.Fatalf("empty Args: %v, want ErrInvalidSpec", err)
	}
}

func (s *suite) testConcurrentExec(t *testing.T) {
	ws := workspace(t)
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", "echo " + strconv.Itoa(i) + " | tee f" + strconv.Itoa(i)}})
			switch {
			case err != nil:
				errs <- err
			case string(res.Stdout) != strconv.Itoa(i)+"\n" || res.ExitCode != 0:
				errs <- errors.New("exec " + strconv.Itoa(i) + " got " + string(res.Stdout))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res := s.sh(t, sb, "cat f0 f1 f2 f3")
	if string(res.Stdout) != "0\n1\n2\n3\n" {
		t.Fatalf("workspace after concurrent execs: %q", res.Stdout)
	}
	if u, err := sb.Stats(t.Context()); err == nil && s.caps.Cgroups && u.CPU <= 0 {
		t.Errorf("Stats reports no CPU use: %+v", u)
	}
}

// testThreads: programs can start threads (glibc's pthread_create uses
// clone3, which the seccomp profile answers in a way glibc falls back
// from; under gVisor that answer must not become EPERM).
func (s *suite) testThreads(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.py(t, sb, `import threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
for th in ts: th.start()
for th in ts: th.join()
print(sorted(out))`)
	mustOK(t, res)
	if strings.TrimSpace(string(res.Stdout)) != "[0, 1, 2, 3]" {
		t.Fatalf("threads: %q", res.Stdout)
	}
}
