package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

const (
	prSetDumpable     = 4
	prSetNoNewPrivs   = 38
	prCapAmbient      = 47
	prCapAmbientClear = 4
	linuxCapabilityV3 = 0x20080522
)

// hardened is set once Harden ran: every process start re-asserts
// non-dumpable (a child's uid change on the shared address space of a
// vfork sets it to the host's fs.suid_dumpable).
var hardened atomic.Bool

// Harden applies the agent's side of the agent model to this process,
// before it serves: it makes itself non-dumpable (its /proc files become
// root's, and no process of another uid may read its memory or trace it,
// whatever the host's ptrace policy), sets no_new_privs, and empties its
// ambient and inheritable capability sets on every thread, so that nothing
// the code runs can inherit a capability. (The runner starts the agent that
// way already; this is the agent not relying on it.) A binary built with
// cgo cannot change every thread (syscall.AllThreadsSyscall refuses): it
// changes the calling thread only. Either way Harden then checks every
// thread and fails if one keeps an ambient or inheritable capability.
func Harden() error {
	if err := prctl(prSetDumpable, 0); err != nil {
		return fmt.Errorf("harden: PR_SET_DUMPABLE: %w", err)
	}
	hardened.Store(true)
	err := allThreads(func(call func(trap, a1, a2, a3 uintptr) error) error {
		if err := call(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); err != nil {
			return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
		}
		// EINVAL: a kernel without ambient capabilities (before 4.3).
		if err := call(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClear, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
		}
		hdr, data := capHeader{version: linuxCapabilityV3}, [2]capData{}
		if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
			return fmt.Errorf("capget: %w", e)
		}
		data[0].inheritable, data[1].inheritable = 0, 0
		if err := call(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("harden: %w", err)
	}
	return checkThreads()
}

type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

// allThreads runs f with a call that applies a syscall to every thread
// of the process; in a cgo binary, where that is refused, to the calling
// thread only (checkThreads then tells whether the others are clean).
func allThreads(f func(call func(trap, a1, a2, a3 uintptr) error) error) error {
	every := func(trap, a1, a2, a3 uintptr) error {
		if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3); e != 0 {
			return e
		}
		return nil
	}
	err := f(every)
	if !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return f(func(trap, a1, a2, a3 uintptr) error {
		if _, _, e := syscall.RawSyscall(trap, a1, a2, a3); e != 0 {
			return e
		}
		return nil
	})
}

// checkThreads fails unless every thread has empty ambient and
// inheritable capability sets.
func checkThreads() error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("harden: list threads: %v", err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the thread exited
			}
			return fmt.Errorf("harden: %w", err)
		}
		seen := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k != "CapInh" && k != "CapAmb" {
				continue
			}
			seen++
			if v = strings.TrimSpace(v); strings.Trim(v, "0") != "" {
				return fmt.Errorf("harden: %s: %s = %s, want none (build the agent with CGO_ENABLED=0, or start it without)", p, k, v)
			}
		}
		if seen != 2 {
			return fmt.Errorf("harden: %s lacks CapInh or CapAmb", p)
		}
	}
	return nil
}

// redumpable re-asserts non-dumpable after a process start (see hardened).
func redumpable() {
	if hardened.Load() {
		prctl(prSetDumpable, 0)
	}
}

func prctl(option, arg uintptr) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, option, arg, 0); e != 0 {
		return e
	}
	return nil
}
