package runner

import (
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Isolation is a sandbox's isolation, decided in one place (policy.Compile,
// from the tool's effects) and carried to the runner as data. A runner
// applies it as given, never derives any of it itself, and refuses
// (ErrUnsupported) what it cannot apply. Values are shared between specs:
// never modify one.
type Isolation struct {
	Workspace WorkspaceMode
	Network   NetworkMode
	// Seccomp is the seccomp profile of every process in the sandbox, the
	// agent included, for the host kernel: runc loads it (the OCI spec of
	// the containerd runner, the JSON of the Docker runner) and the local
	// runner compiles it to BPF (policy/seccompbpf).
	Seccomp *specs.LinuxSeccomp
	// SeccompGVisor is the same policy as gVisor's Sentry applies it
	// (runsc --oci-seccomp): runtimes running runsc use it instead of
	// Seccomp.
	SeccompGVisor *specs.LinuxSeccomp
	// MaskedPaths are made inaccessible inside the sandbox (a directory
	// becomes an empty read-only tmpfs, a file /dev/null), ReadonlyPaths
	// read-only. Paths the sandbox lacks are skipped.
	MaskedPaths   []string
	ReadonlyPaths []string
}

// CheckIsolation checks that spec carries a compiled isolation every runner
// can apply: known modes, a seccomp profile, an Egress for NetworkEgress.
// Errors wrap ErrInvalidSpec. Runners call it first in Create.
func CheckIsolation(spec SandboxSpec) error {
	iso := spec.Isolation
	if iso == nil {
		return fmt.Errorf("create sandbox: no compiled isolation (policy.Compile): %w", ErrInvalidSpec)
	}
	switch iso.Network {
	case NetworkNone:
	case NetworkEgress:
		if spec.Egress == nil {
			return fmt.Errorf("create sandbox: network %q needs SandboxSpec.Egress: %w", iso.Network, ErrInvalidSpec)
		}
	default:
		return fmt.Errorf("create sandbox: network %q: %w", iso.Network, ErrInvalidSpec)
	}
	switch iso.Workspace {
	case WorkspaceNone, WorkspaceReadOnly, WorkspaceReadWrite:
	default:
		return fmt.Errorf("create sandbox: workspace mode %q: %w", iso.Workspace, ErrInvalidSpec)
	}
	if iso.Seccomp == nil || iso.SeccompGVisor == nil {
		return fmt.Errorf("create sandbox: isolation without a seccomp profile: %w", ErrInvalidSpec)
	}
	return nil
}
