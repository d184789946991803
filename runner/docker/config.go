package docker

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// DefaultImage is the image of a sandbox whose spec names none.
const DefaultImage = "sandboxd/python:latest"

// Built-in defaults used for any zero field of Config.Defaults.
var builtinDefaults = runner.Limits{
	MemoryBytes: 512 << 20,
	PIDs:        256,
	CPUMillis:   1000,
	Timeout:     60 * time.Second,
	OutputBytes: 1 << 20,
	NoFile:      1024,
	FileSize:    100 << 20,
}

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
	// StateDir holds one host directory per sandbox, mounted at
	// /run/sandboxd for the agent's socket. Default
	// $TMPDIR/sandboxd-docker. The Docker daemon must see the same path
	// (it runs on this host).
	StateDir string
	// InstanceID labels the containers this runner owns. Reconcile removes
	// managed containers with another owner that predate this runner.
	// Default: random per process.
	InstanceID string
	// Runtime is the OCI runtime ("" = the daemon default, runc). runsc
	// (gVisor) needs --host-uds=all in its runtime args for the agent
	// socket to be visible on the host.
	Runtime string
	// Defaults fill zero limits of a SandboxSpec.
	Defaults runner.Limits
	// TmpBytes caps the /tmp and /dev/shm tmpfs of each sandbox. Default 64 MiB.
	TmpBytes int64
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
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if err := hostside.CompleteConfig("docker", &c.AgentPath, &c.StateDir, &c.InstanceID); err != nil {
		return err
	}
	if c.TmpBytes == 0 {
		c.TmpBytes = 64 << 20
	}
	if c.TmpBytes < 0 {
		return fmt.Errorf("docker: TmpBytes %d is negative", c.TmpBytes)
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = 30 * time.Second
	}
	if err := hostside.ValidLimits(c.Defaults); err != nil {
		return fmt.Errorf("docker: Defaults: %w", err)
	}
	c.Defaults = hostside.MergeLimits(c.Defaults, builtinDefaults)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}
