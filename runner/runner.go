// Package runner defines the contract between the job service and sandbox
// backends. A backend only creates and destroys isolated sandboxes; running a
// tool, counting effects and deciding policy happen above it.
//
// Lifecycle: Runner.Create returns a started Sandbox; the caller runs zero or
// more Exec calls (sequentially or concurrently) and must call Close exactly
// once it is done; Close is idempotent and reaps everything the sandbox
// created (processes, cgroups, mounts, temp dirs) whatever the code did.
package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

// Runner creates sandboxes on one backend.
type Runner interface {
	Name() string
	// Capabilities reports what isolation this runner can honour on this
	// host. Create refuses a spec that needs more (ErrUnsupported): a
	// runner never silently weakens isolation.
	Capabilities() Capabilities
	Create(ctx context.Context, spec SandboxSpec) (Sandbox, error)
}

// Reaper is implemented by runners that can find and destroy sandboxes left
// behind by an earlier process (after kill -9). The job service calls it once
// at start.
type Reaper interface {
	Reap(ctx context.Context) (reaped int, err error)
}

// ReplicaReaper is implemented by runners that can destroy every sandbox
// a given replica made (SandboxSpec.Replica) on the backend they reach,
// whether that replica's process is alive or not: its lease expired and
// another replica took its bookkeeping over.
type ReplicaReaper interface {
	ReapReplica(ctx context.Context, replica string) (reaped int, err error)
}

// Dependent is implemented by runners that reach a daemon or a cluster
// API: the addresses they reach it at, as URLs ("unix:///var/run/docker.sock",
// "tcp://10.0.0.5:2376", later "https://k8s.example.com:6443"). sandboxd
// protects every TCP one from connections made on a tenant's behalf
// (internal/netclass.Protected).
type Dependent interface {
	Dependencies() []string
}

// ImageNamer is implemented by runners whose SandboxSpec.Image names
// something (an image reference on the container runners, a rootfs
// directory on the local runner). The job service holds every image a
// client names to the operator's allowlist with it, before any Create.
type ImageNamer interface {
	// DefaultImage is what an empty SandboxSpec.Image runs, in canonical
	// form; "" when that default has no name (the local runner's view of
	// the host).
	DefaultImage() string
	// CanonicalImage returns image's canonical spelling (two spellings of
	// one image give one string), or an error wrapping ErrInvalidSpec when
	// image is malformed. It never asks a daemon whether the image exists.
	CanonicalImage(image string) (string, error)
}

// Sandbox is one isolated environment.
type Sandbox interface {
	ID() string
	// Exec runs p to completion. Exit codes, signals, OOM kills, timeouts
	// and truncation are reported in Result; error is for infrastructure
	// faults only. Cancelling ctx kills the process tree.
	Exec(ctx context.Context, p Process) (Result, error)
	Stats(ctx context.Context) (Usage, error)
	Close(ctx context.Context) error
}

// AgentSandbox is implemented by sandboxes that run the sandbox agent
// (every backend: local, docker, containerd). Found by type assertion: the agent gives a
// persistent Python REPL and file operations inside the sandbox's own view.
// The client belongs to the sandbox; callers must not Close it.
type AgentSandbox interface {
	Sandbox
	Agent() *agent.Client
}

// WorkspaceSyncer is implemented by sandboxes whose read-write workspace
// is a copy inside the sandbox, kept in step with the host directory
// (SandboxSpec.Workspace) rather than the host directory itself (the
// Kubernetes runner's pods: the node is not sandboxd's host). Exec syncs
// by itself; work done through AgentSandbox.Agent() does not: a caller
// that changes or reads the workspace through the agent (a REPL cell, a
// file operation) calls PushWorkspace before it, so that the host's
// changes (uploads) reach the sandbox, and PullWorkspace after it, so
// that the sandbox's changes, deletions included, reach the host. Both
// are cheap when nothing changed (a listing, no file read).
type WorkspaceSyncer interface {
	PushWorkspace(ctx context.Context) error
	PullWorkspace(ctx context.Context) error
}

// Prestarter is implemented by sandboxes that can start a process ahead of
// its Exec (every agent backend): Prestart starts p now, and the first
// Exec of the same process (Args, Env, Dir, the same output streaming,
// with Stdin) hands it its stdin instead of starting it, so that Exec
// skips the process's start-up. Its timeout and Duration count from the
// Exec and its Result is what a process started then would give. Any
// other Exec kills the prestarted process first. p.Stdin must be nil (the
// Exec brings it). An error leaves the sandbox usable: Execs start
// processes as usual.
type Prestarter interface {
	Prestart(ctx context.Context, p Process) error
}

// Capabilities lists the isolation features a runner can provide here.
type Capabilities struct {
	PIDNamespace   bool `json:"pid_namespace"`
	NetNamespace   bool `json:"net_namespace"`
	MountNamespace bool `json:"mount_namespace"`
	Cgroups        bool `json:"cgroups"`
	Seccomp        bool `json:"seccomp"`
	Landlock       bool `json:"landlock"`
	// Network is true when the runner can give a sandbox network access.
	Network bool `json:"network"`
}

// WorkspaceMode says how the workspace is visible inside the sandbox.
type WorkspaceMode string

const (
	WorkspaceNone      WorkspaceMode = "none"
	WorkspaceReadOnly  WorkspaceMode = "ro"
	WorkspaceReadWrite WorkspaceMode = "rw"
)

// NetworkMode says what network a sandbox gets. The seccomp profile of
// Isolation goes with it: inet sockets only with NetworkEgress.
type NetworkMode string

const (
	// NetworkNone: an empty network namespace (loopback only) and, where
	// seccomp is available, inet sockets denied.
	NetworkNone NetworkMode = "none"
	// NetworkEgress: still no route out, but an HTTP proxy listens inside
	// the sandbox at EgressProxyAddr and carries every connection to
	// SandboxSpec.Egress on the host, which decides what may pass. Inet
	// sockets are allowed (seccomp) so the sandbox can reach that proxy.
	NetworkEgress NetworkMode = "egress"
)

// EgressProxyAddr is where, inside a NetworkEgress sandbox, the egress proxy
// listens (the sandbox's own loopback). Callers point HTTP_PROXY and
// HTTPS_PROXY at "http://"+EgressProxyAddr.
const EgressProxyAddr = "127.0.0.1:3128"

// AgentDir is the directory of the agent's socket inside every sandbox
// that runs the sandbox agent: owned by the agent's uid (policy.AgentUID),
// mode 0700, so the code can neither list, traverse nor write it.
const AgentDir = "/run/sandboxd"

// AgentSocketPath is where the sandbox agent listens inside the sandbox.
const AgentSocketPath = AgentDir + "/agent.sock"

// EgressSocketPath is where the egress unix socket appears inside container
// sandboxes (the sandbox agent forwards EgressProxyAddr to it; only the
// agent can reach it, in AgentDir).
const EgressSocketPath = AgentDir + "/egress.sock"

// Egress serves a sandbox's outbound connections. The runner creates a unix
// listener private to the sandbox (its identity: whoever connects to it is
// that sandbox), calls Serve in its own goroutine, and closes the listener
// in Sandbox.Close. Each accepted connection carries the bytes a client in
// the sandbox sent to EgressProxyAddr, unchanged (HTTP proxy protocol).
type Egress interface {
	Serve(l net.Listener) error
}

// SandboxSpec describes the sandbox to create.
type SandboxSpec struct {
	// ID is optional; the runner assigns one when empty.
	ID string
	// Image is backend specific: a rootfs directory for the local runner,
	// an image reference for container runners. Empty means the backend's
	// default.
	Image string
	// Workspace is a host directory shown at /workspace (WorkspaceDir)
	// as Isolation.Workspace says.
	Workspace string
	// Isolation is required: the sandbox's isolation as policy.Compile
	// decided it. A spec without it is refused (ErrInvalidSpec).
	Isolation *Isolation
	// Egress is required when Isolation.Network is NetworkEgress and
	// ignored otherwise.
	Egress Egress
	Limits Limits
	Labels map[string]string
	// Replica is the sandboxd replica making the sandbox (its replica
	// id; empty with one process). Runners record it (a label, the
	// local runner's owner record) so that a live replica sharing the
	// backend reaps a dead one's sandboxes (ReplicaReaper).
	Replica string
	// Tenant, when set, puts the sandbox's cgroup under a parent cgroup
	// of the tenant's (TenantCgroup), shared by all its sandboxes, of CPU
	// weight TenantWeight (1..10000; 0: 100): CPU is shared by tenant, not
	// by sandbox. A runner that cannot (a remote Docker daemon, the
	// systemd cgroup driver) ignores it.
	Tenant       string
	TenantWeight int
}

// TenantCPUCapper is a runner that can cap a tenant's parent cgroup
// (SandboxSpec.Tenant) at an amount of CPU, not only weigh it. Weights
// alone do not keep a tenant's latency while another tenant's fork bombs
// keep hundreds of tasks runnable: the job service caps the tenants that
// compete at their weighted share of the host (job's cpuCaps).
type TenantCPUCapper interface {
	// CapTenantCPU caps the tenant's group (made with weight, when it is
	// not yet) at millis thousandths of a core; 0 removes the cap. A
	// runner may apply more than asked (cgroup v1: never less than a live
	// sandbox's own quota).
	CapTenantCPU(tenant string, weight int, millis int64) error
}

// TenantCgroup is the name of a tenant's parent cgroup: "tenant-" and the
// name when it is a plain word (letters, digits, '_', '-', '.', at most
// 64 bytes, not starting with '.'), else "tenant-" and a hash of it.
func TenantCgroup(tenant string) string {
	plain := tenant != "" && len(tenant) <= 64 && tenant[0] != '.'
	for _, c := range tenant {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			plain = false
		}
	}
	if plain {
		return "tenant-" + tenant
	}
	sum := sha256.Sum256([]byte(tenant))
	return "tenant-" + hex.EncodeToString(sum[:8])
}

// CPUWeight is a TenantWeight as cgroup v2's cpu.weight (1..10000, 0:
// 100) and as v1's cpu.shares (weight*1024/100, at least 2).
func CPUWeight(w int) (weight, shares uint64) {
	if w <= 0 {
		w = 100
	}
	w = min(w, 10000)
	return uint64(w), max(uint64(w)*1024/100, 2)
}

// WorkspaceDir is where the workspace appears inside every sandbox.
const WorkspaceDir = "/workspace"

// Limits are resource ceilings for a sandbox. Zero means the runner default.
// The yaml and doc tags make the daemon's limits.defaults.* and
// limits.ceilings.* keys (package config; its built-in values live there).
type Limits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty" yaml:"memory_bytes" doc:"memory (and memory+swap) of the sandbox"`
	PIDs        int64 `json:"pids,omitempty" yaml:"pids" doc:"processes and threads"`
	// CPUMillis is CPU bandwidth in thousandths of a core.
	CPUMillis int64 `json:"cpu_millis,omitempty" yaml:"cpu_millis" doc:"CPU bandwidth in thousandths of a core"`
	// Timeout is the default wall-clock limit of one Exec.
	Timeout time.Duration `json:"timeout,omitempty" yaml:"timeout" doc:"wall-clock time of a call (a tool's timeout_seconds asks for it too)"`
	// OutputBytes caps each of stdout and stderr (head and tail kept).
	OutputBytes int64 `json:"output_bytes,omitempty" yaml:"output_bytes" doc:"each of stdout and stderr (head and tail kept)"`
	NoFile      int64 `json:"nofile,omitempty" yaml:"nofile" doc:"open files"`
	FileSize    int64 `json:"file_size_bytes,omitempty" yaml:"file_size_bytes" doc:"size of one file written"`
	// DiskBytes and DiskInodes bound every writable path of the sandbox,
	// each on its own: the workspace (a filesystem of this size and inode
	// count, which the job service makes: internal/workspace) and the
	// /tmp and /dev/shm tmpfs (see Tmpfs).
	DiskBytes  int64 `json:"disk_bytes,omitempty" yaml:"disk_bytes" doc:"size of the workspace, its own filesystem (at least 16 MiB), and the most /tmp and /dev/shm each hold (they are memory too); writing past it is ENOSPC, an upload past it 507 workspace_full"`
	DiskInodes int64 `json:"disk_inodes,omitempty" yaml:"disk_inodes" doc:"files and directories the workspace, /tmp and /dev/shm each hold (at least 128; at most one per 4 KiB of disk_bytes)"`
}

// Tmpfs is the size= and nr_inodes= of a sandbox's writable tmpfs mounts
// (/tmp, /dev/shm) for a runner whose own cap is tmpBytes: at most
// tmpBytes and DiskBytes, at most DiskInodes files and one per 4 KiB of
// the size (as on the workspace's filesystem).
func (l Limits) Tmpfs(tmpBytes int64) (size, inodes int64) {
	size = tmpBytes
	if l.DiskBytes > 0 && (size <= 0 || l.DiskBytes < size) {
		size = l.DiskBytes
	}
	inodes = max(size/4096, 1)
	if l.DiskInodes > 0 {
		inodes = min(inodes, l.DiskInodes)
	}
	return size, inodes
}

// Process is one command to run inside a sandbox.
type Process struct {
	Args []string
	// Env is the complete environment (the sandbox inherits none).
	Env []string
	// Dir is the working directory inside the sandbox; default WorkspaceDir
	// when a workspace is mounted, else "/".
	Dir   string
	Stdin io.Reader
	// Timeout overrides Limits.Timeout when non-zero.
	Timeout time.Duration
	// Stdout and Stderr, when set, receive output as it is produced (in
	// addition to the capped copy in Result). They must not block long.
	Stdout, Stderr io.Writer
	// LongLived marks a process that serves requests until it exits, ctx
	// ends or the sandbox closes (an MCP provider speaking over its stdio):
	// no wall-clock timeout applies (Timeout and Limits.Timeout are
	// ignored), Stdin is forwarded as it arrives instead of being read
	// whole before the start, and Stdout and Stderr receive all the
	// output, not only the capped part kept in Result.
	LongLived bool
}

// Result is how a process ended. It is data, not an error.
type Result struct {
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the process ("SIGKILL"), if any.
	Signal    string `json:"signal,omitempty"`
	OOMKilled bool   `json:"oom_killed"`
	TimedOut  bool   `json:"timed_out"`
	// ForkLoop: the process was killed because its sandbox kept hitting
	// its pids limit (a fork bomb; see runner/internal/hostside's
	// ExecWatch). Signal is SIGKILL.
	ForkLoop        bool          `json:"fork_loop,omitempty"`
	Stdout          []byte        `json:"stdout"`
	Stderr          []byte        `json:"stderr"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	Duration        time.Duration `json:"duration"`
	Usage           Usage         `json:"usage"`
	// KilledAt is when the kill of a timed-out process was sent (zero:
	// not timed out, or a runner that does not say).
	KilledAt time.Time `json:"killed_at,omitzero"`
}

// Usage is what a sandbox or process consumed.
type Usage struct {
	CPU        time.Duration `json:"cpu"`
	PeakMemory int64         `json:"peak_memory"`
}
