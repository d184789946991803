package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReap runs in a child process that makes itself a child subreaper,
// so orphans are re-parented to it as they would be to pid 1.
func TestReap(t *testing.T) {
	if os.Getenv("AGENT_REAP_HELPER") == "1" {
		reapHelper()
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReap$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENT_REAP_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func reapHelper() {
	fail := func(msg string, args ...any) {
		os.Stderr.WriteString(msg + "\n")
		os.Exit(2)
	}
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fail("prctl: " + e.Error())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Reap(ctx)

	// Own children keep their exit status, however many orphans die meanwhile.
	for range 5 {
		orphans := exec.Command("sh", "-c", "for i in 1 2 3 4 5; do (sleep 0.05 &) ; done")
		own := exec.Command("sh", "-c", "sleep 0.1; exit 5")
		if err := procs.start(orphans); err != nil {
			fail(err.Error())
		}
		if err := procs.start(own); err != nil {
			fail(err.Error())
		}
		orphans.Wait()
		procs.done(orphans.Process.Pid)
		err := own.Wait()
		procs.done(own.Process.Pid)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 {
			fail("own child lost its status: " + errString(err))
		}
	}
	// Reap collects every orphan: no children (zombie or not) remain.
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids := ""
		tasks, _ := filepath.Glob("/proc/self/task/*/children")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			kids += strings.TrimSpace(string(b))
		}
		if kids == "" {
			return
		}
		if time.Now().After(deadline) {
			fail("children left unreaped: " + kids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
