package hostside

import (
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
)

// iso is a compiled isolation as far as CheckSpec looks at one.
func iso(ws runner.WorkspaceMode, network runner.NetworkMode) *runner.Isolation {
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	return &runner.Isolation{Workspace: ws, Network: network, Seccomp: sc, SeccompGVisor: sc}
}

func TestCheckSpec(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	none := iso(runner.WorkspaceNone, runner.NetworkNone)
	for _, tc := range []struct {
		name string
		spec runner.SandboxSpec
		ok   bool
	}{
		{"default", runner.SandboxSpec{Isolation: none}, true},
		{"no isolation", runner.SandboxSpec{}, false},
		{"no seccomp profile", runner.SandboxSpec{Isolation: &runner.Isolation{Workspace: runner.WorkspaceNone, Network: runner.NetworkNone}}, false},
		{"egress without Egress", runner.SandboxSpec{Isolation: iso(runner.WorkspaceNone, runner.NetworkEgress)}, false},
		{"bad network", runner.SandboxSpec{Isolation: iso(runner.WorkspaceNone, "host")}, false},
		{"bad workspace mode", runner.SandboxSpec{Isolation: iso("bogus", runner.NetworkNone)}, false},
		{"bad id", runner.SandboxSpec{ID: "../x", Isolation: none}, false},
		{"relative workspace", runner.SandboxSpec{Workspace: "w", Isolation: iso(runner.WorkspaceReadOnly, runner.NetworkNone)}, false},
		{"missing workspace", runner.SandboxSpec{Isolation: iso(runner.WorkspaceReadWrite, runner.NetworkNone)}, false},
		{"workspace", runner.SandboxSpec{Workspace: ws, Isolation: iso(runner.WorkspaceReadWrite, runner.NetworkNone)}, true},
		{"reserved label", runner.SandboxSpec{Isolation: none, Labels: map[string]string{"sandboxd.owner": "x"}}, false},
		{"tiny memory", runner.SandboxSpec{Isolation: none, Limits: runner.Limits{MemoryBytes: 1 << 20}}, false},
	} {
		err := CheckSpec(&tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
