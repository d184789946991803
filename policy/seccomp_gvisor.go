package policy

import (
	"encoding/json"
	"fmt"
	"slices"
)

// SeccompGVisor adapts a profile (Docker's JSON, as SeccompProfile returns)
// for gVisor with --oci-seccomp. There the Sentry applies the profile but
// answers EPERM for every errno rule, whatever its errno; glibc falls back
// from clone3 to clone only on ENOSYS, so the rule refusing clone3 would
// stop every thread. Under gVisor clone3 is allowed instead: the Sentry
// implements it, and the namespaces it could create belong to gVisor's
// kernel, not the host's. Everything else is kept.
func SeccompGVisor(profile []byte) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(profile, &p); err != nil {
		return nil, fmt.Errorf("policy: gVisor seccomp profile: %w", err)
	}
	rules, _ := p["syscalls"].([]any)
	found := false
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		names, _ := rule["names"].([]any)
		if rule["action"] != "SCMP_ACT_ERRNO" || !slices.Contains(names, any("clone3")) {
			continue
		}
		if len(names) != 1 {
			return nil, fmt.Errorf("policy: gVisor seccomp profile: clone3 shares an errno rule with %v", names)
		}
		rule["action"] = "SCMP_ACT_ALLOW"
		delete(rule, "errnoRet")
		found = true
	}
	if !found {
		return profile, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("policy: gVisor seccomp profile: %w", err)
	}
	return b, nil
}
