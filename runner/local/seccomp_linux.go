package local

import (
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in every sandbox: kernel attack surface a
// tool never needs, and everything that could undo the isolation.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"kexec_load", "kexec_file_load", "reboot",
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"init_module", "finit_module", "delete_module",
	"swapon", "swapoff", "acct", "quotactl", "lookup_dcookie", "syslog", "vhangup",
	"open_by_handle_at", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
	"fanotify_init", "kcmp", "move_pages", "mbind", "set_mempolicy", "migrate_pages",
	"pidfd_getfd",
}

// Socket families denied even when a network is allowed.
const (
	afUnix  = 1
	afAlg   = 38
	afVsock = 40
)

// x32SyscallBit marks x32-ABI syscall numbers on x86_64.
const x32SyscallBit = 0x40000000

// cloneNSFlags are the clone flags that create namespaces.
const cloneNSFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

var (
	eperm  = seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	enosys = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
)

// seccompPolicy is an allow-by-default filter with the denials above.
func seccompPolicy(denyInet bool) seccomp.Policy {
	socket := []seccomp.NameWithConditions{}
	if denyInet {
		socket = append(socket, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.NotEqual, Value: afUnix},
		}})
	} else {
		for _, af := range []uint64{afAlg, afVsock} {
			socket = append(socket, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.Equal, Value: af},
			}})
		}
	}
	conditional := append(socket,
		seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNSFlags},
		}},
		// Only the personalities Docker allows (0, PER_LINUX32,
		// UNAME26, both, and the 0xffffffff query).
		seccomp.NameWithConditions{Name: "personality", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0},
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0x8},
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20000},
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20008},
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0xffffffff},
		}},
		// TIOCSTI / TIOCLINUX inject input into a terminal.
		seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{
			{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCSTI},
		}},
		seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{
			{Argument: 1, Operation: seccomp.Equal, Value: 0x541C}, // TIOCLINUX
		}},
	)
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: deniedSyscalls, Action: eperm},
			{NamesWithCondtions: conditional, Action: eperm},
			// glibc falls back to clone when clone3 is missing; clone3's
			// flags live in memory and cannot be inspected.
			{Names: []string{"clone3"}, Action: enosys},
		},
	}
}

// seccompProgram assembles the policy behind an architecture check that
// kills the process for any non-native syscall ABI (the library alone would
// apply the default action, allow, to them). On x86_64 the x32 ABI shares
// the native audit arch but sets bit 30 of the syscall number, so a denied
// syscall's x32 twin would miss the deny list's exact numbers: those are
// killed as well.
func seccompProgram(denyInet bool) ([]unix.SockFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	p := seccompPolicy(denyInet)
	insts, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: x32SyscallBit, SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}, insts...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// loadSeccomp installs the filter (assembled once by the parent) on every
// thread of the helper (TSYNC); the forked command inherits it.
// no_new_privs must already be set.
func loadSeccomp(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return fmt.Errorf("empty filter")
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("load filter: %w", errno)
	}
	return nil
}

// seccompFilter returns the filter for NetworkNone sandboxes, or nil when
// seccomp filters cannot be loaded here.
func seccompFilter() []unix.SockFilter {
	if !seccomp.Supported() {
		return nil
	}
	f, err := seccompProgram(true)
	if err != nil {
		return nil
	}
	return f
}
