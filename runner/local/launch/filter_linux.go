package launch

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// SockFilterSize is sizeof(struct sock_filter): Config.Seccomp holds
// len/SockFilterSize instructions in the kernel's layout.
const SockFilterSize = int(unsafe.Sizeof(unix.SockFilter{}))

// loadSeccomp installs the filter on this thread, the one that execs; the
// agent and every process it starts inherit it. no_new_privs must already
// be set.
func loadSeccomp(b []byte) error {
	if len(b) == 0 || len(b)%SockFilterSize != 0 || len(b)/SockFilterSize > 0xffff {
		return fmt.Errorf("filter of %d bytes", len(b))
	}
	filter := make([]unix.SockFilter, len(b)/SockFilterSize)
	for i := range filter {
		r := b[i*SockFilterSize:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("load filter: %w", errno)
	}
	return nil
}

// applyLandlock restricts file access, once the root is built, to reading
// and executing everywhere, writing /tmp, /dev/shm, the writable device
// nodes, the agent's directory (its socket) and, read-write, /workspace.
// It binds the agent and the code alike; it is defence in depth behind
// the read-only mounts, so it is best effort.
func applyLandlock(cfg *Config) error {
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs("/tmp", "/dev/shm", AgentDir),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"),
	}
	if cfg.WorkspaceMode == WorkspaceReadWrite {
		rules = append(rules, landlock.RWDirs("/workspace"))
	}
	return landlock.V7.BestEffort().RestrictPaths(rules...)
}
