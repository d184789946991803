package policy

import (
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Row is one line of the effect → isolation table.
type Row struct {
	Effect  tools.Effect
	Without string // what a sandbox without the effect gets
	With    string // what the effect adds
	// Enforced names the mechanism on each runner, in RunnerNames order.
	Enforced [len(RunnerNames)]string
}

// RunnerNames are the table's runner columns.
var RunnerNames = [...]string{"local", "docker", "containerd", "docker/containerd + runsc (gVisor)"}

// Table is the effect → isolation table (DESIGN.md, tightened). Compile is
// its code; TestTableMatchesCompile keeps the two saying the same thing, and
// the README carries Markdown() verbatim (checked by a test).
var Table = []Row{
	{
		Effect:  tools.EffectExec,
		Without: "no sandbox: the tool runs in-process (calculator, http_request)",
		With:    "a sandbox with memory, pids, CPU, file size, open file and output limits and a wall-clock timeout",
		Enforced: [...]string{
			"cgroup v1/v2 + rlimits; own pid, mount, ipc, uts, net namespaces",
			"container limits (cgroups), pids limit, ulimits",
			"OCI spec cgroup limits, rlimits",
			"the same cgroup limits (they also count gVisor's own ~16 MiB); the pids limit is RLIMIT_NPROC inside gVisor; an OOM kills the whole sandbox, which the runner restarts (workspace kept); syscalls are served by gVisor's kernel (Sentry, systrap platform)",
		},
	},
	{
		Effect:  tools.EffectFileRead,
		Without: "workspace not mounted",
		With:    "workspace mounted read-only at /workspace",
		Enforced: [...]string{
			"no bind / read-only bind + Landlock",
			"no mount / bind of the workspace's read-only view (ro,nosuid,nodev on the host: Docker's own ro would drop nosuid,nodev)",
			"no mount / read-only bind mount",
			"as runc (gofer-mediated bind mount)",
		},
	},
	{
		Effect:  tools.EffectFileWrite,
		Without: "workspace read-only (or absent)",
		With:    "workspace read-write; the root filesystem stays read-only, /tmp is a fresh tmpfs",
		Enforced: [...]string{
			"read-write bind; root is a read-only tmpfs view",
			"read-write bind; ReadonlyRootfs; tmpfs /tmp",
			"read-write bind; read-only root snapshot mount; tmpfs /tmp",
			"as runc",
		},
	},
	{
		Effect:  tools.EffectHTTP,
		Without: "no network (loopback only) and seccomp refuses AF_INET/AF_INET6 sockets",
		With:    "still no route out: an HTTP proxy at 127.0.0.1:3128 inside the sandbox carries connections over a per-sandbox unix socket to sandboxd's egress proxy, which enforces the tenant's allowlist (hosts, ports, methods) and refuses loopback, private, link-local, CGNAT and metadata addresses after resolution",
		Enforced: [...]string{
			"empty net namespace (lo only) + seccomp socket filter; agent forwards the proxy",
			"network none + seccomp socket filter; agent forwards the proxy",
			"own net namespace (lo only) + seccomp socket filter; agent forwards the proxy",
			"network none as runc. The host kernel never applies the OCI profile to sandbox code (the Sentry serves it, under gVisor's own host filter); with --oci-seccomp (set by scripts/gvisor-setup.sh) the Sentry applies it inside, answering EPERM for every denied call, so clone3 is allowed there (glibc falls back to clone only on ENOSYS). clone3(CLONE_NEWUSER) therefore succeeds (seccomp cannot read clone3's flags): the child is root of a new user namespace inside gVisor's kernel, and under the same profile it still cannot mount (tmpfs or bind), chroot, setns, unshare a network namespace, set the hostname, open an inet socket without http, read what its parent cannot or write / or /proc/sys (a conformance test on every runner)",
		},
	},
}

// Always lists what every sandbox gets whatever its effects.
var Always = []string{
	fmt.Sprintf("the code (every process, the Python REPL included) runs as uid %d, gid %d, with no supplementary groups, no capabilities and no_new_privs", CodeUID, CodeGID),
	fmt.Sprintf("the code cannot signal, trace or read pid 1 (its memory, /proc files, fds) nor reach the agent's socket: the agent (pid 1 of every sandbox) runs as uid %d with only %s, no_new_privs and the same seccomp profile, and is non-dumpable; its socket is %s in a directory of uid %d, mode 0700. Under gVisor the code can still list and read pid 1's /proc fdinfo (fd numbers, offsets, flags)", AgentUID, agentCapabilityList(), runner.AgentSocketPath, AgentUID),
	"one seccomp profile for every runner, Docker's default tightened and deny by default (policy/): AF_ALG, AF_VSOCK, AF_PACKET, io_uring, keyctl, bpf, perf_event_open, ptrace, mount, unshare/setns, clone's namespace flags, userfaultfd, kexec, the TIOCSTI and TIOCLINUX ioctls and non-native architectures denied; the int arguments it checks (socket family, ioctl command, clone flags, personality) are compared on their low 32 bits, the bits the kernel reads. Docker and containerd get it as JSON and OCI spec, the local runner as BPF compiled from the same profile",
	"read-only root filesystem, fresh /tmp and /dev/shm, masked /proc paths",
	"a disk limit (limits.disk_bytes, disk_inodes): the workspace is a filesystem of its own of that size and inode count (an ext4 image on a loop device, mounted nosuid,nodev on the host, also for uploads), and /tmp and /dev/shm are tmpfs with the same size= (or the runner's smaller cap) and nr_inodes=; a full one is ENOSPC, never a full host disk. Under gVisor the Sentry drops nr_inodes (files in /tmp count against the memory limit) and has no nodev (a device node in the workspace opens only gVisor's own emulation of that device), and under Docker its workspace mount lacks nosuid (no_new_privs still ignores set-user-ID bits)",
	"cleared environment, no file descriptors beyond 0-2, no runtime sockets (Docker, containerd, sandboxd's API are unreachable)",
}

// Markdown renders Table and Always as the README shows them.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| effect | without it | with it |")
	for _, n := range RunnerNames {
		fmt.Fprintf(&b, " %s |", n)
	}
	b.WriteString("\n|---|---|---|")
	for range RunnerNames {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range Table {
		fmt.Fprintf(&b, "| `%s` | %s | %s |", r.Effect, r.Without, r.With)
		for _, e := range r.Enforced {
			fmt.Fprintf(&b, " %s |", e)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nEvery sandbox, whatever its effects:\n\n")
	for _, a := range Always {
		fmt.Fprintf(&b, "- %s\n", a)
	}
	return b.String()
}
