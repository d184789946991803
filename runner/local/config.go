package local

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runner"
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
	// StateDir holds one directory per sandbox (its ownership record, used
	// by Reap, and the mount point of its root). Required.
	StateDir string
	// Rootfs, when set, is a directory bound read-only as the sandbox root
	// (an unpacked image). Empty: a read-only view of the host's system
	// directories (/usr, /bin, /sbin, /lib*, /etc).
	Rootfs string
	// CgroupParent is the cgroup under which each sandbox gets its own
	// group. Default "sandboxd".
	CgroupParent string
	// UID and GID run the sandboxed commands. Default 65534 (nobody).
	UID, GID int
	// Defaults fill zero limits of a SandboxSpec.
	Defaults runner.Limits
	// TmpBytes caps the /tmp and /dev/shm tmpfs of each Exec. Default 64 MiB.
	TmpBytes int64
	// HelperPath is the binary re-executed as the sandbox init helper.
	// Default /proc/self/exe (the running binary, whose main must call
	// MaybeHelper first). A small dedicated binary whose main only calls
	// MaybeHelper avoids paying a large binary's package initialisation
	// on every Exec.
	HelperPath string
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
	if c.HelperPath == "" {
		c.HelperPath = "/proc/self/exe"
	} else if !filepath.IsAbs(c.HelperPath) {
		return fmt.Errorf("local: HelperPath %q must be absolute", c.HelperPath)
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "sandboxd"
	}
	c.CgroupParent = strings.Trim(filepath.Clean("/"+c.CgroupParent), "/")
	for _, part := range strings.Split(c.CgroupParent, "/") {
		if !validName(part) {
			return fmt.Errorf("local: CgroupParent %q is not a valid cgroup path", c.CgroupParent)
		}
	}
	if c.UID == 0 {
		c.UID = 65534
	}
	if c.GID == 0 {
		c.GID = 65534
	}
	if c.UID < 0 || c.GID < 0 {
		return fmt.Errorf("local: UID/GID %d/%d must not be negative", c.UID, c.GID)
	}
	c.Defaults = mergeLimits(c.Defaults, builtinDefaults)
	if c.TmpBytes <= 0 {
		c.TmpBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// mergeLimits fills the zero fields of l from d.
func mergeLimits(l, d runner.Limits) runner.Limits {
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.PIDs <= 0 {
		l.PIDs = d.PIDs
	}
	if l.CPUMillis <= 0 {
		l.CPUMillis = d.CPUMillis
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = d.OutputBytes
	}
	if l.NoFile <= 0 {
		l.NoFile = d.NoFile
	}
	if l.FileSize <= 0 {
		l.FileSize = d.FileSize
	}
	if l.DiskBytes <= 0 {
		l.DiskBytes = d.DiskBytes
	}
	if l.DiskInodes <= 0 {
		l.DiskInodes = d.DiskInodes
	}
	return l
}

// validName accepts sandbox IDs and cgroup names: 1-64 of [A-Za-z0-9_.-],
// not "." or "..".
func validName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
		default:
			return false
		}
	}
	return true
}
