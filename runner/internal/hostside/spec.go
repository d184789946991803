package hostside

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
// local runner's helper re-executes the daemon's binary for every sandbox.
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

// CompleteConfig checks and completes what the container runners' configs
// share: the agent binary (required, made absolute, a regular file), the
// state directory (default $TMPDIR/sandboxd-<name>, made absolute) and the
// instance ID (default random; ValidID). name prefixes the errors.
func CompleteConfig(name string, agentPath, stateDir, instanceID *string) error {
	if *agentPath == "" {
		return fmt.Errorf("%s: AgentPath is required", name)
	}
	var err error
	if *agentPath, err = filepath.Abs(*agentPath); err != nil {
		return fmt.Errorf("%s: AgentPath %q: %w", name, *agentPath, err)
	}
	if fi, err := os.Stat(*agentPath); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: AgentPath %q is not a regular file", name, *agentPath)
	}
	if *stateDir == "" {
		*stateDir = filepath.Join(os.TempDir(), "sandboxd-"+name)
	}
	if *stateDir, err = filepath.Abs(*stateDir); err != nil {
		return fmt.Errorf("%s: StateDir %q: %w", name, *stateDir, err)
	}
	if *instanceID == "" {
		*instanceID = NewID()
	}
	if !ValidID(*instanceID) {
		return fmt.Errorf("%s: InstanceID %q: want [a-zA-Z0-9_.-], at most 63 characters", name, *instanceID)
	}
	return nil
}
