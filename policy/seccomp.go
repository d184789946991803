// Package policy turns a tool's effects into sandbox isolation. For now it
// owns the seccomp profile every container sandbox runs under.
package policy

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls are refused (EPERM) whatever capabilities a sandbox has:
// kernel attack surface no tool needs, and the syscalls that escape or
// inspect other isolation layers (namespaces, mounts, tracing, keyrings).
// Docker's default profile allows several of them conditionally (by
// capability or kernel version); the tightened profile never does.
var deniedSyscalls = []string{
	"add_key", "keyctl", "request_key",
	"bpf", "perf_event_open",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load",
	"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"open_by_handle_at", "name_to_handle_at",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"setns", "unshare",
	"userfaultfd",
}

// Socket domains a sandbox may create. Everything else (AF_ALG, AF_VSOCK,
// AF_PACKET, AF_BLUETOOTH, ...) falls through to the default action, EPERM.
var (
	localDomains = []uint64{unix.AF_UNIX}
	inetDomains  = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
)

// SeccompProfile returns the seccomp profile, as Docker's JSON format, for a
// sandbox. It is Docker's default profile tightened:
//
//   - only the native architecture of each ArchMap entry (no 32-bit or x32
//     compat ABI: a foreign-ABI syscall kills the process);
//   - socket(2) only for AF_UNIX, plus AF_INET, AF_INET6 and AF_NETLINK when
//     allowInet (the http effect); AF_ALG, AF_VSOCK and AF_PACKET never;
//   - deniedSyscalls refused with EPERM regardless of capabilities.
//
// Clone namespace flags stay restricted as in the default profile (allowed
// only with CAP_SYS_ADMIN, which sandboxes never have). The output is
// deterministic: the golden files in testdata pin it.
func SeccompProfile(allowInet bool) ([]byte, error) {
	p := seccomp.DefaultProfile()
	for i := range p.ArchMap {
		p.ArchMap[i].SubArches = nil
	}
	drop := append(slices.Clone(deniedSyscalls), "socket", "socketcall")
	kept := p.Syscalls[:0]
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(drop, n) })
		if sc.Name != "" && slices.Contains(drop, sc.Name) {
			sc.Name = ""
		}
		if len(sc.Names) == 0 && sc.Name == "" {
			continue
		}
		kept = append(kept, sc)
	}
	p.Syscalls = kept

	domains := localDomains
	if allowInet {
		domains = inetDomains
	}
	for _, d := range domains {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{
				Names:  []string{"socket"},
				Action: specs.ActAllow,
				// EQ on the full 64-bit argument: garbage in the upper
				// half fails the match and is denied.
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: d, Op: specs.OpEqualTo}},
			},
			Comment: "socket domain " + domainName(d),
		})
	}
	eperm := uint(unix.EPERM)
	p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
		LinuxSyscall: specs.LinuxSyscall{
			Names:    slices.Clone(deniedSyscalls),
			Action:   specs.ActErrno,
			ErrnoRet: &eperm,
		},
		Comment: "sandboxd: denied regardless of capabilities",
	})
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != eperm {
		return nil, fmt.Errorf("policy: base seccomp profile default action changed to %s", p.DefaultAction)
	}
	b, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		return nil, fmt.Errorf("policy: marshal seccomp profile: %w", err)
	}
	return append(b, '\n'), nil
}

func domainName(d uint64) string {
	switch d {
	case unix.AF_UNIX:
		return "AF_UNIX"
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	case unix.AF_NETLINK:
		return "AF_NETLINK"
	}
	return fmt.Sprint(d)
}
