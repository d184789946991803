package docker

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
)

// seccompOpt is the security option that gives a container the
// isolation's seccomp profile: Seccomp under runc, SeccompGVisor under
// runsc. Docker's seccomp JSON is a superset of the OCI form (the same
// field names; its archMap, includes and excludes are optional), so the
// profile goes as its OCI JSON, resolved already: the daemon adds nothing
// by capability or kernel version.
func (r *Runner) seccompOpt(iso *runner.Isolation) (string, error) {
	p := iso.Seccomp
	if r.gvisor {
		p = iso.SeccompGVisor
	}
	js, err := seccompJSON(p)
	if err != nil {
		return "", err
	}
	return "seccomp=" + js, nil
}

// seccompJSONs memoizes seccompJSON: profiles are shared, immutable
// values (a handful of distinct ones).
var seccompJSONs sync.Map // *specs.LinuxSeccomp → string

// seccompJSON is p in Docker's seccomp profile format.
func seccompJSON(p *specs.LinuxSeccomp) (string, error) {
	if js, ok := seccompJSONs.Load(p); ok {
		return js.(string), nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seccomp profile: %w", err)
	}
	seccompJSONs.Store(p, string(b))
	return string(b), nil
}
