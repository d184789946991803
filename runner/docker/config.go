package docker

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// DefaultImage is the image of a sandbox whose spec names none.
const DefaultImage = "sandboxd/python:latest"

// Config configures a Docker Runner.
type Config struct {
	// Host is the Docker daemon address. Default: DOCKER_HOST, else
	// unix:///var/run/docker.sock.
	Host string
	// Image is the default sandbox image. Default DefaultImage. It must
	// have /workspace and run as (or allow) uid 65534.
	Image string
	// AgentPath is the host path of the static sandbox-agent binary,
	// bind-mounted read-only into every sandbox as its pid 1. Required.
	AgentPath string
	// StateDir holds this runner's directory (StateDir/<InstanceID>, with
	// its owner record) and in it one host directory per sandbox, mounted
	// at /run/sandboxd for the agent's socket (hostside.StateRoot).
	// Runners may share it: another's directory is removed only once its
	// owner is dead. Default $TMPDIR/sandboxd-docker; sandboxd uses
	// <data dir>/docker. It must leave room for the sockets (108 bytes),
	// and the Docker daemon must see the same path (it runs on this host).
	StateDir string
	// InstanceID labels the containers this runner owns. Reconcile removes
	// managed containers of this instance that no open sandbox holds and
	// those of other owners whose process is dead. Default: random per
	// process.
	InstanceID string
	// Runtime is the OCI runtime ("" = the daemon default, runc). runsc
	// (gVisor) needs --host-uds=all in its runtime args for the agent
	// socket to be visible on the host.
	Runtime string
	// Defaults fill zero limits of a SandboxSpec.
	Defaults runner.Limits
	// TmpBytes caps the /tmp and /dev/shm tmpfs of each sandbox. Default 64 MiB.
	TmpBytes int64
	// CgroupParent is the cgroup under which each tenant's parent cgroup
	// is made (SandboxSpec.Tenant: --cgroup-parent
	// /CgroupParent/tenant-NAME, its CPU weight written by sandboxd), when
	// the daemon uses the cgroupfs driver and this host's /sys/fs/cgroup.
	// Default "sandboxd" (the local runner's: a tenant's sandboxes of
	// both runners share its group).
	CgroupParent string
	// ReconcileInterval is how often orphaned containers are removed.
	// Default 30s; negative disables the loop (Reap still works).
	ReconcileInterval time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Host == "" {
		c.Host = os.Getenv("DOCKER_HOST")
	}
	if c.Host == "" {
		c.Host = "unix:///var/run/docker.sock"
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "sandboxd"
	}
	c.CgroupParent = strings.Trim(filepath.Clean("/"+c.CgroupParent), "/")
	if c.Image == "" {
		c.Image = DefaultImage
	}
	return hostside.CompleteConfig("docker", hostside.ConfigFields{
		AgentPath: &c.AgentPath, StateDir: &c.StateDir, InstanceID: &c.InstanceID, Defaults: &c.Defaults,
		TmpBytes: &c.TmpBytes, ReconcileInterval: &c.ReconcileInterval, Logger: &c.Logger,
	})
}
