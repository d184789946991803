package local

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
)

// The local runner applies the isolation's seccomp profile (the one the
// container runtimes load) as BPF compiled by policy/seccompbpf; it has no
// policy of its own.

// seccompSupported reports whether this kernel filters syscalls with
// seccomp BPF and the compiler knows this architecture.
func seccompSupported() error {
	if _, err := seccompbpf.LookupArch(runtime.GOARCH); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_GET_SECCOMP: %w", err)
	}
	// An invalid filter pointer: EFAULT means the kernel has filter mode.
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, 0)
	if errno != unix.EFAULT {
		return fmt.Errorf("seccomp filter mode: %w", errno)
	}
	return nil
}

// compileSeccomp compiles p for this architecture.
func compileSeccomp(p *specs.LinuxSeccomp) ([]unix.SockFilter, error) {
	arch, err := seccompbpf.LookupArch(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := seccompbpf.Assemble(p, arch)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// loadSeccomp installs the filter (compiled once by the parent) on every
// thread of the helper (TSYNC); the forked command inherits it.
// no_new_privs must already be set.
func loadSeccomp(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return errors.New("empty filter")
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("load filter: %w", errno)
	}
	return nil
}
