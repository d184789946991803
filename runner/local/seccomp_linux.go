package local

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
	"github.com/sandboxd/sandboxd/runner/local/launch"
)

// The local runner applies the isolation's seccomp profile (the one the
// container runtimes load) as BPF compiled by policy/seccompbpf; its
// launcher loads it before it execs the agent. It has no policy of its own.

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
// sock_filter array, as bytes (the launcher gets them in its config: a
// JSON array of structs would cost a millisecond per sandbox).
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
	out := make([]byte, 0, len(raw)*launch.SockFilterSize)
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	compiled.Store(p, out)
	return out, nil
}
