// Package launch is the local runner's sandbox launcher: the small static
// program (cmd/sandbox-launch) that the runner starts for every sandbox in
// fresh pid, mount, network, ipc and uts namespaces, and that turns itself
// into the sandbox agent once the isolation is built.
//
// Protocol with the runner: the launcher starts blocked reading its Config
// (JSON) from ConfigFD until EOF, so the runner can first put it into the
// sandbox's cgroups. It then brings lo up, builds the root (Main's doc says
// what it holds), sets the hostname, applies rlimits, Landlock, the
// capability bounding set (Config.KeepCaps), no_new_privs and the seccomp
// filter (Config.Seccomp, compiled by the runner from the isolation's
// profile), and execs Config.Args (the agent, as pid 1 of the sandbox, uid
// 0 with only the KeepCaps capabilities). A setup failure is written as
// text to StatusFD before the launcher exits 1; a successful exec closes
// StatusFD (close-on-exec) without a byte, which is how the runner knows
// the agent runs.
//
// The launcher imports only the standard library, golang.org/x/sys and
// go-landlock: it starts in about a millisecond, unlike the daemon's
// binary, whose package initialisation alone costs more.
package launch

// Descriptors the runner passes to the launcher.
const (
	ConfigFD = 3 // runner -> launcher: Config as JSON; EOF releases it
	StatusFD = 4 // launcher -> runner: a setup error as text, or EOF at exec
)

// Paths inside the sandbox (those of the container runners: see
// runner/internal/hostside).
const (
	AgentBinary = "/run/sandboxd-agent/sandbox-agent"
	AgentDir    = "/run/sandboxd"
)

// Workspace modes of Config.Workspace (runner.WorkspaceMode's values).
const (
	WorkspaceReadOnly  = "ro"
	WorkspaceReadWrite = "rw"
)

// Config is everything the launcher needs.
type Config struct {
	// Probe: report success at once (the runner's namespace probe).
	Probe bool `json:"probe,omitempty"`
	// Root is an empty directory on the host (in the sandbox's state dir)
	// where the new root is assembled, in the launcher's own mount
	// namespace.
	Root string `json:"root"`
	// Rootfs is an unpacked image bound read-only as the root; "" builds
	// a read-only view of the host's system directories.
	Rootfs string `json:"rootfs,omitempty"`
	// Workspace is the host directory shown at /workspace, in
	// WorkspaceMode ("" = not shown).
	Workspace     string `json:"workspace,omitempty"`
	WorkspaceMode string `json:"workspace_mode,omitempty"`
	// TmpBytes and TmpInodes size the /tmp and /dev/shm tmpfs (size=,
	// nr_inodes=: runner.Limits.Tmpfs).
	TmpBytes  int64 `json:"tmp_bytes"`
	TmpInodes int64 `json:"tmp_inodes"`
	// AgentPath is the host path of the agent binary, bound read-only at
	// AgentBinary; RunDir the host directory bound at AgentDir (the
	// runner's, mode 0700: the agent's socket lives there).
	AgentPath string `json:"agent_path"`
	RunDir    string `json:"run_dir"`
	// Args is the command exec'd at the end, Args[0] a path inside the
	// new root (AgentBinary), with an empty environment.
	Args []string `json:"args"`
	// Rlimits of the sandbox (every process in it).
	NoFile   uint64 `json:"nofile"`
	FileSize uint64 `json:"fsize"`
	// Masked and ReadOnly are the isolation's masked and read-only paths.
	Masked   []string `json:"masked,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	// Landlock restricts file access (best effort; defence in depth
	// behind the read-only mounts).
	Landlock bool `json:"landlock,omitempty"`
	// KeepCaps is the capability bounding set as a mask (bit n:
	// capability n); after the exec as uid 0 it is also the agent's
	// effective and permitted set.
	KeepCaps uint64 `json:"keep_caps"`
	// Seccomp is the filter as the kernel's struct sock_filter array;
	// empty: none (a host without seccomp and AllowWeak).
	Seccomp []byte `json:"seccomp,omitempty"`
}
