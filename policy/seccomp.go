package policy

import (
	"runtime"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
)

// The one seccomp policy of every sandbox, on every runner, for the agent
// and the code alike. It is Docker's default profile resolved for a process
// without capabilities and tightened:
//
//   - deny by default (EPERM), native architecture only: a foreign or x32
//     syscall ABI kills the process;
//   - seccompAllowed unconditionally; seccompDenied (and everything else)
//     never;
//   - the int arguments it looks at are compared on their low 32 bits
//     (SCMP_CMP_MASKED_EQ with a mask within 0xffffffff), the bits the
//     kernel reads: socket(2)'s family, ioctl(2)'s command, personality(2)
//     and clone(2)'s flags give a value with garbage in the high half
//     exactly the answer of the plain value;
//   - socket(2) for AF_UNIX, and with the http effect also AF_INET,
//     AF_INET6 and AF_NETLINK; AF_ALG, AF_VSOCK, AF_PACKET and the rest
//     never;
//   - clone(2) without namespace flags; clone3(2) answers ENOSYS (its flags
//     are in memory, out of seccomp's reach; glibc then falls back to
//     clone); unshare and setns never;
//   - personality(2) only for Docker's values;
//   - ioctl(2) for every command but TIOCSTI and TIOCLINUX (terminal input
//     injection).
//
// Every rule shape loads under runc (libseccomp), gVisor's --oci-seccomp
// and policy/seccompbpf alike, and means the same in all three: each rule
// has at most one condition per argument (runc and gVisor OR several), and
// a syscall's rules all share one action (no runtime has to resolve
// overlapping rules). Where a shape could not be expressed that way, the
// safe form is used: ioctl's "every command but two" is a union of masked
// equalities (ioctlAllBut), never two ANDed inequalities, which runc would
// OR into "every command".

// seccompAllowed are allowed with any arguments (Docker's default list
// without capabilities, less adjtimex and clock_adjtime, which only set
// the clock; 32-bit-only names dropped: those ABIs are killed).
var seccompAllowed = []string{
	"accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk", "cachestat", "capget",
	"capset", "chdir", "chmod", "chown", "clock_getres", "clock_gettime", "clock_nanosleep", "close",
	"close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3", "epoll_create",
	"epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
	"faccessat2", "fadvise64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
	"fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock",
	"fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex",
	"futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "futimesat", "get_robust_list",
	"get_thread_area", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "geteuid", "getgid",
	"getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority",
	"getrandom", "getresgid", "getresuid", "getrlimit", "getrusage", "getsid", "getsockname",
	"getsockopt", "gettid", "gettimeofday", "getuid", "getxattr", "getxattrat", "inotify_add_watch",
	"inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
	"io_pgetevents", "io_setup", "io_submit", "ioprio_get", "ioprio_set", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "lchown", "lgetxattr", "link", "linkat",
	"listen", "listmount", "listxattr", "listxattrat", "llistxattr", "lremovexattr", "lseek",
	"lsetxattr", "lstat", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret",
	"mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap",
	"modify_ldt", "mprotect", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
	"mq_timedsend", "mq_unlink", "mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd", "msync",
	"munlock", "munlockall", "munmap", "nanosleep", "newfstatat", "open", "openat", "openat2",
	"pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
	"process_mrelease", "pselect6", "pwrite64", "pwritev", "pwritev2", "read", "readahead",
	"readlink", "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "remap_file_pages",
	"removexattr", "removexattrat", "rename", "renameat", "renameat2", "restart_syscall", "rmdir",
	"rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl", "semget",
	"semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto", "set_robust_list",
	"set_thread_area", "set_tid_address", "setfsgid", "setfsuid", "setgid", "setgroups", "setitimer",
	"setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid", "setrlimit", "setsid",
	"setsockopt", "setuid", "setxattr", "setxattrat", "shmat", "shmctl", "shmdt", "shmget",
	"shutdown", "sigaltstack", "signalfd", "signalfd4", "socketpair", "splice", "stat", "statfs",
	"statmount", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo",
	"tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime", "times", "tkill",
	"truncate", "umask", "uname", "unlink", "unlinkat", "uretprobe", "utime", "utimensat", "utimes",
	"vfork", "vmsplice", "wait4", "waitid", "write", "writev",
}

// seccompDenied are never allowed, whatever a sandbox's capabilities: kernel
// attack surface no tool needs and what escapes or inspects other isolation
// layers (namespaces, mounts, tracing, keyrings, modules, clocks). Deny by
// default already refuses them; the list is the contract the tests hold the
// profile to (no rule may allow one).
var seccompDenied = []string{
	"_sysctl", "acct", "add_key", "adjtimex", "bpf", "chroot", "clock_adjtime", "clock_settime",
	"delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
	"init_module", "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl",
	"kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "migrate_pages",
	"mount", "mount_setattr", "move_mount", "move_pages", "name_to_handle_at", "nfsservctl",
	"open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd", "pivot_root",
	"process_vm_readv", "process_vm_writev", "ptrace", "quotactl", "reboot", "request_key",
	"set_mempolicy", "setdomainname", "sethostname", "setns", "settimeofday", "swapoff", "swapon",
	"sysfs", "syslog", "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vhangup",
}

// Socket families a sandbox may create.
var (
	localFamilies = []uint64{unix.AF_UNIX}
	inetFamilies  = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
)

// dockerPersonalities are the personality(2) values Docker allows:
// PER_LINUX, PER_LINUX32, UNAME26, both, and the 0xffffffff query.
var dockerPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// cloneNamespaceFlags may not be passed to clone(2): CLONE_NEWNS,
// CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
// CLONE_NEWNET (Docker's mask; CLONE_NEWTIME shares clone's signal byte
// and exists only for clone3 and unshare).
const cloneNamespaceFlags = 0x7E020000

// Terminal ioctls that inject input or drive the console.
const (
	tiocsti   = 0x5412
	tioclinux = 0x541C
)

// low32 is the mask of an int argument: the bits the kernel reads.
const low32 = 0xffffffff

// seccompProfile builds the profile for goarch. inet adds the inet socket
// families (the http effect). The value is fresh; callers share it as
// immutable.
func seccompProfile(inet bool, goarch string) *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &eperm}
	names := slices.Clone(seccompAllowed)
	if a, err := seccompbpf.LookupArch(goarch); err == nil {
		p.Architectures = []specs.Arch{a.OCI}
		names = slices.DeleteFunc(names, func(n string) bool { _, ok := a.Syscall(n); return !ok })
	}
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActAllow})
	for _, v := range dockerPersonalities {
		p.Syscalls = append(p.Syscalls, allowIf("personality", 0, low32, v))
	}
	cloneFlags := uint(0)
	if goarch == "s390x" {
		cloneFlags = 1 // clone(stack, flags, ...)
	}
	p.Syscalls = append(p.Syscalls,
		allowIf("clone", cloneFlags, cloneNamespaceFlags, 0),
		specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	families := localFamilies
	if inet {
		families = inetFamilies
	}
	for _, f := range families {
		p.Syscalls = append(p.Syscalls, allowIf("socket", 0, low32, f))
	}
	for _, c := range ioctlAllBut(tiocsti, tioclinux) {
		p.Syscalls = append(p.Syscalls, allowIf("ioctl", 1, c.mask, c.value))
	}
	return p
}

// allowIf allows name when (argument index & mask) == value.
func allowIf(name string, index uint, mask, value uint64) specs.LinuxSyscall {
	return specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: index, Op: specs.OpMaskedEqual, Value: mask, ValueTwo: value}}}
}

// maskedValue is one "(x & mask) == value" test on a 32-bit value.
type maskedValue struct{ mask, value uint64 }

// ioctlAllBut returns masked equalities whose union is every 32-bit value
// except refused: OCI has no masked inequality, and two inequalities on one
// argument are ORed by runc. Walking the 32 bits from the top, each bit on
// the way to a refused value contributes the other branch, when no refused
// value lies in it: the branch "bits above as on the path, this bit
// flipped" as one masked equality.
func ioctlAllBut(refused ...uint32) []maskedValue {
	var out []maskedValue
	var walk func(prefix uint32, bit int, rs []uint32)
	walk = func(prefix uint32, bit int, rs []uint32) {
		if bit < 0 {
			return // a refused value itself
		}
		mask := uint32(low32) << bit // the bits above bit, and bit
		var zero, one []uint32
		for _, r := range rs {
			if r>>bit&1 == 0 {
				zero = append(zero, r)
			} else {
				one = append(one, r)
			}
		}
		for _, b := range []struct {
			v  uint32
			rs []uint32
		}{{prefix, zero}, {prefix | 1<<bit, one}} {
			if len(b.rs) == 0 {
				out = append(out, maskedValue{uint64(mask), uint64(b.v)})
			} else {
				walk(b.v, bit-1, b.rs)
			}
		}
	}
	walk(0, 31, refused)
	return out
}

// seccompGVisor is p for gVisor's Sentry (runsc --oci-seccomp). It answers
// EPERM for every errno rule, whatever its errno, and glibc falls back from
// clone3 to clone only on ENOSYS: clone3's ENOSYS rule would stop every
// thread. Under gVisor clone3 is allowed instead; the Sentry implements
// it, and what a clone3(CLONE_NEWUSER) child gains stays inside gVisor's
// kernel and this same profile (runnertest's Clone3UserNS proves it gains
// nothing its parent lacks). Everything else is p's.
func seccompGVisor(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	g := *p
	g.Syscalls = slices.Clone(p.Syscalls)
	for i, sc := range g.Syscalls {
		if slices.Equal(sc.Names, []string{"clone3"}) {
			g.Syscalls[i] = specs.LinuxSyscall{Names: sc.Names, Action: specs.ActAllow}
		}
	}
	return &g
}

// nativeProfile is seccompProfile for this host's architecture.
func nativeProfile(inet bool) *specs.LinuxSeccomp { return seccompProfile(inet, runtime.GOARCH) }
