package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Isolation is what a sandbox for one tool gets, compiled from the tool's
// effect tags. Every runner honours it or refuses the sandbox (a runner never
// weakens it); the settings that hold for every sandbox whatever the effects
// are listed in Always.
type Isolation struct {
	// Sandbox is false for tools without the exec effect: they run
	// in-process and no sandbox is created.
	Sandbox   bool
	Workspace runner.WorkspaceMode
	Network   runner.NetworkMode
	// AllowInet says whether the seccomp profile lets the sandbox create
	// AF_INET/AF_INET6 sockets (only to reach the egress proxy: the
	// sandbox has no route out).
	AllowInet bool
}

// Compile maps a tool's effects to its sandbox's isolation. It is the code
// form of Table.
func Compile(effects []tools.Effect) Isolation {
	has := func(e tools.Effect) bool { return slices.Contains(effects, e) }
	iso := Isolation{
		Sandbox:   has(tools.EffectExec),
		Workspace: runner.WorkspaceNone,
		Network:   runner.NetworkNone,
	}
	switch {
	case has(tools.EffectFileWrite):
		iso.Workspace = runner.WorkspaceReadWrite
	case has(tools.EffectFileRead):
		iso.Workspace = runner.WorkspaceReadOnly
	}
	if has(tools.EffectHTTP) {
		iso.Network = runner.NetworkEgress
		iso.AllowInet = true
	}
	return iso
}

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
			"empty net namespace + seccomp socket filter; helper forwards the proxy",
			"network none + seccomp socket filter; agent forwards the proxy",
			"own net namespace (lo only) + seccomp socket filter; agent forwards the proxy",
			"network none as runc. The host kernel never applies the OCI profile to sandbox code (the Sentry serves it, under gVisor's own host filter); with --oci-seccomp (set by scripts/gvisor-setup.sh) the Sentry applies it inside, answering EPERM for every denied call, so clone3 is allowed there (glibc falls back to clone only on ENOSYS)",
		},
	},
}

// Always lists what every sandbox gets whatever its effects.
var Always = []string{
	fmt.Sprintf("the code (every process, the Python REPL included) runs as uid %d, gid %d, with no supplementary groups, no capabilities and no_new_privs", CodeUID, CodeGID),
	fmt.Sprintf("the code cannot signal, trace or read pid 1 (its memory, /proc files, fds) nor reach the agent's socket: the agent (pid 1 of container sandboxes) runs as uid %d with only %s, no_new_privs and the same seccomp profile, and is non-dumpable; its socket is %s in a directory of uid %d, mode 0700. The local runner's pid 1 is its helper (uid 0). Under gVisor the code can still list and read pid 1's /proc fdinfo (fd numbers, offsets, flags)", AgentUID, agentCapabilityList(), runner.AgentSocketPath, AgentUID),
	"Docker's default seccomp profile tightened: AF_ALG, AF_VSOCK, AF_PACKET, io_uring, keyctl, bpf, perf_event_open, ptrace, mount, unshare/setns, userfaultfd, kexec and non-native architectures denied",
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
