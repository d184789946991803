package containerd

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Defaults of Config.
const (
	DefaultAddress     = "/run/containerd/containerd.sock"
	DefaultNamespace   = "sandboxd"
	DefaultImage       = "sandboxd/python:latest"
	DefaultSnapshotter = "overlayfs"
	// DefaultRunscBinary is what Runtime "runsc" runs through the runc v2
	// shim: scripts/containerd-setup.sh writes it as a wrapper adding
	// --platform=systrap --host-uds=all.
	DefaultRunscBinary = "/usr/local/bin/runsc-sandboxd"
)

// Runtime names accepted in Config.Runtime besides a full shim name.
const (
	RuntimeRunc  = "io.containerd.runc.v2"
	RuntimeRunsc = "runsc"
)

// Config configures a containerd Runner.
type Config struct {
	// Address is containerd's socket. Default DefaultAddress (the daemon
	// scripts/containerd-setup.sh starts; not dockerd's own containerd).
	Address string
	// Namespace is the containerd namespace of every sandbox. Default
	// DefaultNamespace.
	Namespace string
	// Image is the default sandbox image, a reference already imported
	// into Namespace ("sandboxd/python:latest" means
	// "docker.io/sandboxd/python:latest"). Default DefaultImage. Images
	// are never pulled. They must have /workspace, /usr/bin/env and allow
	// uid 65534 (the root is mounted read-only, so mount points cannot be
	// created).
	Image string
	// Snapshotter unpacks images. Default DefaultSnapshotter.
	Snapshotter string
	// AgentPath is the host path of the static sandbox-agent binary,
	// bind-mounted read-only into every sandbox as its pid 1. Required.
	AgentPath string
	// StateDir holds this runner's directory (StateDir/<InstanceID>, with
	// its owner record) and in it one host directory per sandbox (its
	// agent socket dir, mounted at /run/sandboxd, its network namespace,
	// its log; hostside.StateRoot). Runners may share it: another's
	// directory is removed only once its owner is dead. Default
	// $TMPDIR/sandboxd-containerd; sandboxd uses <data dir>/containerd. It
	// must leave room for the sockets (108 bytes), and containerd runs on
	// this host and must see the same path.
	StateDir string
	// InstanceID labels the containers this runner owns. Default: random
	// per process.
	InstanceID string
	// Runtime selects the OCI runtime: "" (runc through
	// io.containerd.runc.v2), "runsc" (gVisor: the runc v2 shim running
	// RunscBinary), or a shim name such as "io.containerd.runsc.v1".
	Runtime string
	// RunscBinary is the runsc wrapper Runtime "runsc" runs. Default
	// DefaultRunscBinary.
	RunscBinary string
	// Defaults fill zero limits of a SandboxSpec.
	Defaults runner.Limits
	// TmpBytes caps the /tmp and /dev/shm tmpfs of each sandbox. Default 64 MiB.
	TmpBytes int64
	// ReconcileInterval is how often orphaned sandboxes are removed.
	// Default 30s; negative disables the loop (Reap still works).
	ReconcileInterval time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
}

var (
	validNS = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?$`)
)

func (c *Config) setDefaults() error {
	if c.Address == "" {
		c.Address = DefaultAddress
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if !validNS.MatchString(c.Namespace) {
		return fmt.Errorf("containerd: namespace %q: want [a-zA-Z0-9_.-], at most 63 characters", c.Namespace)
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.Snapshotter == "" {
		c.Snapshotter = DefaultSnapshotter
	}
	if c.RunscBinary == "" {
		c.RunscBinary = DefaultRunscBinary
	}
	return hostside.CompleteConfig("containerd", hostside.ConfigFields{
		AgentPath: &c.AgentPath, StateDir: &c.StateDir, InstanceID: &c.InstanceID, Defaults: &c.Defaults,
		TmpBytes: &c.TmpBytes, ReconcileInterval: &c.ReconcileInterval, Logger: &c.Logger,
	})
}
