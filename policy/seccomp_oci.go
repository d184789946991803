package policy

import (
	"fmt"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompOCI returns SeccompProfile(allowInet) converted to the OCI runtime
// spec form that runc (through containerd) loads directly, for runners that
// write the OCI spec themselves. It is resolved for a process with no
// capabilities on this host's architecture and kernel: rules the Docker
// profile grants only to a capability are dropped, as are those of other
// architectures. With gvisor the profile is SeccompGVisor's variant, for
// runsc --oci-seccomp. The result is a fresh value the caller may modify.
func SeccompOCI(allowInet, gvisor bool) (*specs.LinuxSeccomp, error) {
	prof, err := SeccompProfile(allowInet)
	if err != nil {
		return nil, err
	}
	if gvisor {
		if prof, err = SeccompGVisor(prof); err != nil {
			return nil, err
		}
	}
	// Sandboxes hold no capabilities: resolve includes/excludes for an
	// empty bounding set.
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	sc, err := seccomp.LoadProfile(string(prof), rs)
	if err != nil {
		return nil, fmt.Errorf("policy: convert seccomp profile to OCI: %w", err)
	}
	if sc == nil || sc.DefaultAction != specs.ActErrno {
		return nil, fmt.Errorf("policy: OCI seccomp profile lost its default action")
	}
	return sc, nil
}
