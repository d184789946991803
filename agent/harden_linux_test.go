package agent

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestHarden runs Harden in a child started with CAP_KILL in its ambient
// (and so inheritable) set, as a careless runner might start the agent.
// A static build must come out non-dumpable with both sets empty on every
// thread, and so must a process it starts; a cgo build, which can change
// only the calling thread, must refuse to go on.
func TestHarden(t *testing.T) {
	if os.Getenv("AGENT_HARDEN_HELPER") == "1" {
		hardenHelper()
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (ambient capabilities)")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHarden$")
	cmd.Env = append(os.Environ(), "AGENT_HARDEN_HELPER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{5}} // CAP_KILL
	out, err := cmd.CombinedOutput()
	cgo := errors.Is(allThreadsProbe(), syscall.ENOTSUP)
	t.Logf("cgo build: %v; helper: %s", cgo, out)
	switch {
	case cgo:
		if err == nil || !strings.Contains(string(out), "CGO_ENABLED=0") {
			t.Fatalf("cgo build: Harden did not refuse a thread with capabilities left: %v", err)
		}
	case err != nil:
		t.Fatalf("helper: %v", err)
	case !strings.Contains(string(out), "hardened"):
		t.Fatal("helper did not report")
	}
}

func allThreadsProbe() error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prSetDumpable, 1, 0); e != 0 {
		return e
	}
	return nil
}

func hardenHelper() {
	fail := func(msg string) {
		os.Stderr.WriteString(msg + "\n")
		os.Exit(2)
	}
	self := func() string {
		b, _ := os.ReadFile("/proc/self/status")
		return string(b)
	}
	if !strings.Contains(self(), "CapAmb:\t0000000000000020") {
		fail("helper did not start with CAP_KILL ambient:\n" + self())
	}
	if err := Harden(); err != nil {
		fail(err.Error())
	}
	if d, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, 3, 0, 0); d != 0 { // PR_GET_DUMPABLE
		fail("still dumpable")
	}
	for _, want := range []string{"CapInh:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(self(), want) {
			fail("after Harden, want " + want + ":\n" + self())
		}
	}
	// A process started (from any thread) inherits the same.
	out, err := exec.Command("grep", "-E", "^(CapInh|CapAmb|NoNewPrivs):", "/proc/self/status").Output()
	if err != nil || strings.Count(string(out), "0000000000000000") != 2 || !strings.Contains(string(out), "NoNewPrivs:\t1") {
		fail("child: " + string(out))
	}
	os.Stdout.WriteString("hardened\n")
	os.Exit(0)
}
