package containerd

import (
	"cmp"
	"fmt"
	"path"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// specInput is everything one sandbox's OCI spec depends on.
type specInput struct {
	ID        string
	Namespace string // containerd namespace: the cgroup parent
	// CgroupParent, when set, is the cgroup parent instead (a tenant's
	// group, hostside.TenantGroups).
	CgroupParent string
	Spec         runner.SandboxSpec
	Limits       runner.Limits
	AgentPath    string
	RunDir       string // host dir mounted at /run/sandboxd
	NetnsPath    string // host path of the sandbox's network namespace
	TmpBytes     int64
	// GVisor adapts the limits to runsc and takes the gVisor seccomp
	// profile (see gvisor.go).
	GVisor bool
}

// buildSpec is the whole isolation of one sandbox as an OCI runtime spec:
// read-only root, fresh /tmp and /dev/shm, the agent bound read-only, the
// run dir and the workspace (per the isolation's workspace mode), every
// namespace but the user one (the network one prepared by the runner), the
// agent as uid 0 with only the agent's capabilities (it runs the code as
// sandboxUID with none), no_new_privs, cgroup limits, rlimits, and the
// isolation's masked paths and seccomp profile. Pure: tests check it
// without a daemon.
func buildSpec(in specInput) *specs.Spec {
	l, iso := in.Limits, in.Spec.Isolation
	seccomp := iso.Seccomp
	if in.GVisor {
		seccomp = iso.SeccompGVisor
	}
	size, inodes := l.Tmpfs(in.TmpBytes) // /tmp and /dev/shm
	tmp, tmpInodes := fmt.Sprintf("size=%d", size), fmt.Sprintf("nr_inodes=%d", inodes)
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", tmp, tmpInodes}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmp, tmpInodes}},
		// Root-owned and read-only to the sandbox user: it only holds
		// the mount points of the agent and its dir, which runc cannot
		// create in the read-only root.
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=755", "size=1m"}},
		{Destination: hostside.AgentBinary, Type: "bind", Source: in.AgentPath, Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"}},
		{Destination: hostside.AgentDir, Type: "bind", Source: in.RunDir, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec", "rprivate"}},
	}
	switch iso.Workspace {
	case runner.WorkspaceReadOnly:
		mounts = append(mounts, specs.Mount{Destination: runner.WorkspaceDir, Type: "bind", Source: in.Spec.Workspace, Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"}})
	case runner.WorkspaceReadWrite:
		mounts = append(mounts, specs.Mount{Destination: runner.WorkspaceDir, Type: "bind", Source: in.Spec.Workspace, Options: []string{"rbind", "rw", "nosuid", "nodev", "rprivate"}})
	}

	memory, pids := l.MemoryBytes, l.PIDs
	rlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: uint64(l.NoFile), Hard: uint64(l.NoFile)},
		{Type: "RLIMIT_FSIZE", Soft: uint64(l.FileSize), Hard: uint64(l.FileSize)},
		{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
	}
	if in.GVisor {
		pids = gvisorHostPIDs(l.PIDs)
		nproc := uint64(hostside.GVisorNProc(l.PIDs))
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Soft: nproc, Hard: nproc})
	}
	period := uint64(100_000)
	quota := l.CPUMillis * int64(period) / 1000
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: "sandbox",
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			Args: hostside.AgentArgs(iso.Network == runner.NetworkEgress),
			// The agent adds PATH and passes each Exec only what it
			// asks for.
			Env:             []string{},
			Cwd:             "/",
			User:            specs.User{UID: hostside.AgentUID, GID: hostside.AgentGID},
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: hostside.AgentCapabilities(), Effective: hostside.AgentCapabilities(), Permitted: hostside.AgentCapabilities(),
				Inheritable: []string{}, Ambient: []string{},
			},
			Rlimits: rlimits,
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			CgroupsPath: path.Join("/", cmp.Or(in.CgroupParent, in.Namespace), in.ID),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: in.NetnsPath},
			},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &memory, Swap: &memory},
				Pids:    &specs.LinuxPids{Limit: &pids},
				CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
			},
			MaskedPaths:   append([]string(nil), iso.MaskedPaths...),
			ReadonlyPaths: append([]string(nil), iso.ReadonlyPaths...),
			Seccomp:       seccomp,
		},
	}
}
