package hostside

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
)

var (
	// ValidID matches sandbox IDs and instance IDs (container and
	// namespace names allow them everywhere).
	ValidID    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	validLabel = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-/]{0,127}$`)
)

// NewID returns a random sandbox ID.
func NewID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CheckSpec validates a container sandbox's spec and fills its defaults
// (an ID, network none, the workspace mode). Errors wrap
// runner.ErrInvalidSpec.
func CheckSpec(spec *runner.SandboxSpec) error {
	if spec.ID == "" {
		spec.ID = NewID()
	}
	if !ValidID.MatchString(spec.ID) {
		return fmt.Errorf("create sandbox: id %q: %w", spec.ID, runner.ErrInvalidSpec)
	}
	switch spec.Network {
	case "", runner.NetworkNone:
		spec.Network = runner.NetworkNone
	case runner.NetworkEgress:
		if spec.Egress == nil {
			return fmt.Errorf("create sandbox: network %q needs SandboxSpec.Egress: %w", spec.Network, runner.ErrInvalidSpec)
		}
	default:
		return fmt.Errorf("create sandbox: network %q: %w", spec.Network, runner.ErrInvalidSpec)
	}
	switch spec.WorkspaceMode {
	case "":
		spec.WorkspaceMode = runner.WorkspaceNone
		if spec.Workspace != "" {
			spec.WorkspaceMode = runner.WorkspaceReadOnly
		}
	case runner.WorkspaceNone, runner.WorkspaceReadOnly, runner.WorkspaceReadWrite:
	default:
		return fmt.Errorf("create sandbox: workspace mode %q: %w", spec.WorkspaceMode, runner.ErrInvalidSpec)
	}
	if spec.WorkspaceMode != runner.WorkspaceNone {
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
		if !validLabel.MatchString(k) || strings.HasPrefix(k, "sandboxd.") {
			return fmt.Errorf("create sandbox: label %q: %w", k, runner.ErrInvalidSpec)
		}
	}
	return nil
}
