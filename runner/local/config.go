package local

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

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

// Config configures a local Runner.
type Config struct {
	// StateDir holds one directory per sandbox: its ownership record
	// (used by Reap), the mount point of its root and its run dir, the
	// agent's socket directory mounted at /run/sandboxd. Required.
	StateDir string
	// Rootfs, when set, is a directory bound read-only as the sandbox root
	// (an unpacked image; it needs /proc, /dev, /tmp and /run). Empty: a
	// read-only view of the host's system directories (/usr, /bin, /sbin,
	// /lib*, /etc).
	Rootfs string
	// CgroupParent is the cgroup under which each sandbox gets its own
	// group. Default "sandboxd".
	CgroupParent string
	// AgentPath is the static sandbox-agent binary, bound read-only into
	// every sandbox as its pid 1. Required.
	AgentPath string
	// LauncherPath is the static sandbox-launch binary (cmd/sandbox-launch)
	// that builds each sandbox and execs the agent. Required.
	LauncherPath string
	// Defaults fill zero limits of a SandboxSpec; they are also ceilings a
	// spec may only lower (hostside.MergeLimits).
	Defaults runner.Limits
	// TmpBytes caps the /tmp and /dev/shm tmpfs of each sandbox. Default 64 MiB.
	TmpBytes int64
	// AllowWeak lets Create run without isolation features this host lacks
	// (it logs a warning on every Create naming them). Default false: Create
	// refuses with runner.ErrUnsupported.
	AllowWeak bool
	// Logger defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		return fmt.Errorf("local: StateDir is required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("local: StateDir %q: %w", c.StateDir, err)
	}
	c.StateDir = abs
	if c.Rootfs != "" {
		if c.Rootfs, err = filepath.Abs(c.Rootfs); err != nil {
			return fmt.Errorf("local: Rootfs %q: %w", c.Rootfs, err)
		}
	}
	for _, b := range []struct {
		name string
		path *string
	}{{"AgentPath", &c.AgentPath}, {"LauncherPath", &c.LauncherPath}} {
		if *b.path == "" {
			return fmt.Errorf("local: %s is required", b.name)
		}
		if *b.path, err = filepath.Abs(*b.path); err != nil {
			return fmt.Errorf("local: %s %q: %w", b.name, *b.path, err)
		}
		if fi, err := os.Stat(*b.path); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("local: %s %q is not a regular file", b.name, *b.path)
		}
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "sandboxd"
	}
	c.CgroupParent = strings.Trim(filepath.Clean("/"+c.CgroupParent), "/")
	for _, part := range strings.Split(c.CgroupParent, "/") {
		if !hostside.ValidID(part) {
			return fmt.Errorf("local: CgroupParent %q is not a valid cgroup path", c.CgroupParent)
		}
	}
	if err := hostside.ValidLimits(c.Defaults); err != nil {
		return fmt.Errorf("local: Defaults: %w", err)
	}
	c.Defaults = hostside.FillLimits(c.Defaults, builtinDefaults)
	if c.TmpBytes <= 0 {
		c.TmpBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}
