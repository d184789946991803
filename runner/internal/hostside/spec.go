package hostside

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/runner"
)

// ValidID reports whether s is a valid sandbox or instance ID (container
// and namespace names allow them everywhere): a letter or digit, then up to
// 62 letters, digits, '_', '.' or '-'.
func ValidID(s string) bool { return validName(s, 63, false) }

// validLabel is ValidID for label keys: up to 128 characters, '/' allowed.
func validLabel(s string) bool { return validName(s, 128, true) }

// validName is a hand-written matcher, not a regexp: every binary that
// links this package compiles its package-level values at start, and the
// runners' hot paths start often.
func validName(s string, max int, slash bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-' || (slash && c == '/')):
		default:
			return false
		}
	}
	return true
}

// NewID returns a random sandbox or instance ID: 16 hex digits
// (ids.Short, kept short for the unix socket paths it becomes part of).
func NewID() string { return ids.Short("") }

// CheckSpec validates a container sandbox's spec (runner.CheckIsolation
// included) and fills in its ID when empty. Errors wrap
// runner.ErrInvalidSpec.
func CheckSpec(spec *runner.SandboxSpec) error {
	if spec.ID == "" {
		spec.ID = NewID()
	}
	if !ValidID(spec.ID) {
		return fmt.Errorf("create sandbox: id %q: %w", spec.ID, runner.ErrInvalidSpec)
	}
	if err := runner.CheckIsolation(*spec); err != nil {
		return err
	}
	if spec.Isolation.Workspace != runner.WorkspaceNone {
		if spec.Workspace == "" || !filepath.IsAbs(spec.Workspace) {
			return fmt.Errorf("create sandbox: workspace %q must be an absolute path: %w", spec.Workspace, runner.ErrInvalidSpec)
		}
		if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
			return fmt.Errorf("create sandbox: workspace %q is not a directory: %w", spec.Workspace, runner.ErrInvalidSpec)
		}
	}
	if err := ValidLimits(spec.Limits); err != nil {
		return fmt.Errorf("create sandbox: %w: %w", err, runner.ErrInvalidSpec)
	}
	for k := range spec.Labels {
		if !validLabel(k) || strings.HasPrefix(k, "sandboxd.") {
			return fmt.Errorf("create sandbox: label %q: %w", k, runner.ErrInvalidSpec)
		}
	}
	return nil
}

// DefaultLimits fill the zero fields of a container runner's
// Config.Defaults.
var DefaultLimits = runner.Limits{
	MemoryBytes: 512 << 20,
	PIDs:        256,
	CPUMillis:   1000,
	Timeout:     60 * time.Second,
	OutputBytes: 1 << 20,
	NoFile:      1024,
	FileSize:    100 << 20,
}

// ConfigFields point at the fields the container runners' configs share.
type ConfigFields struct {
	AgentPath, StateDir, InstanceID *string
	Defaults                        *runner.Limits
	TmpBytes                        *int64
	ReconcileInterval               *time.Duration
	Logger                          **slog.Logger
}

// CompleteConfig checks and completes what the container runners' configs
// share: the agent binary (required, made absolute, a regular file), the
// state directory (default $TMPDIR/sandboxd-<name>, made absolute), the
// instance ID (default random; ValidID), the default limits (valid,
// DefaultLimits where zero), the tmpfs size (default 64 MiB, not
// negative), the reconcile interval (default 30 s) and the logger
// (default discarding). name prefixes the errors.
func CompleteConfig(name string, f ConfigFields) error {
	if *f.AgentPath == "" {
		return fmt.Errorf("%s: AgentPath is required", name)
	}
	var err error
	if *f.AgentPath, err = filepath.Abs(*f.AgentPath); err != nil {
		return fmt.Errorf("%s: AgentPath %q: %w", name, *f.AgentPath, err)
	}
	if fi, err := os.Stat(*f.AgentPath); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: AgentPath %q is not a regular file", name, *f.AgentPath)
	}
	if *f.StateDir == "" {
		*f.StateDir = filepath.Join(os.TempDir(), "sandboxd-"+name)
	}
	if *f.StateDir, err = filepath.Abs(*f.StateDir); err != nil {
		return fmt.Errorf("%s: StateDir %q: %w", name, *f.StateDir, err)
	}
	if *f.InstanceID == "" {
		*f.InstanceID = NewID()
	}
	if !ValidID(*f.InstanceID) {
		return fmt.Errorf("%s: InstanceID %q: want [a-zA-Z0-9_.-], at most 63 characters", name, *f.InstanceID)
	}
	if *f.TmpBytes == 0 {
		*f.TmpBytes = 64 << 20
	}
	if *f.TmpBytes < 0 {
		return fmt.Errorf("%s: TmpBytes %d is negative", name, *f.TmpBytes)
	}
	if *f.ReconcileInterval == 0 {
		*f.ReconcileInterval = 30 * time.Second
	}
	if err := ValidLimits(*f.Defaults); err != nil {
		return fmt.Errorf("%s: Defaults: %w", name, err)
	}
	*f.Defaults = FillLimits(*f.Defaults, DefaultLimits)
	if *f.Logger == nil {
		*f.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
