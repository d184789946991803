package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
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

// compiled memoizes compileSeccomp: profiles are shared, immutable values
// (policy.Compile's), a handful of distinct ones.
var compiled sync.Map // *specs.LinuxSeccomp → []byte

// compileSeccomp compiles p for this architecture into the kernel's struct
// sock_filter array, as bytes (the helper gets them in its config: a JSON
// array of structs would cost a millisecond per Exec).
func compileSeccomp(p *specs.LinuxSeccomp) ([]byte, error) {
	if b, ok := compiled.Load(p); ok {
		return b.([]byte), nil
	}
	arch, err := seccompbpf.LookupArch(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := seccompbpf.Assemble(p, arch)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(raw)*sockFilterSize)
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	compiled.Store(p, out)
	return out, nil
}

// sockFilterSize is sizeof(struct sock_filter).
const sockFilterSize = int(unsafe.Sizeof(unix.SockFilter{}))

// loadSeccomp installs the filter (compileSeccomp's bytes) on every thread
// of the helper (TSYNC); the forked command inherits it. no_new_privs must
// already be set.
func loadSeccomp(b []byte) error {
	if len(b) == 0 || len(b)%sockFilterSize != 0 {
		return fmt.Errorf("filter of %d bytes", len(b))
	}
	filter := make([]unix.SockFilter, len(b)/sockFilterSize)
	for i := range filter {
		r := b[i*sockFilterSize:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	if len(filter) > 0xffff {
		return errors.New("filter too long")
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("load filter: %w", errno)
	}
	return nil
}
