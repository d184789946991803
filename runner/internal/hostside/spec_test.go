package hostside

import (
	"testing"

	"github.com/sandboxd/sandboxd/runner"
)

func TestCheckSpec(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	for _, tc := range []struct {
		name string
		spec runner.SandboxSpec
		ok   bool
	}{
		{"default", runner.SandboxSpec{}, true},
		{"egress without Egress", runner.SandboxSpec{Network: runner.NetworkEgress}, false},
		{"bad network", runner.SandboxSpec{Network: "host"}, false},
		{"bad id", runner.SandboxSpec{ID: "../x"}, false},
		{"relative workspace", runner.SandboxSpec{Workspace: "w", WorkspaceMode: runner.WorkspaceReadOnly}, false},
		{"workspace", runner.SandboxSpec{Workspace: ws, WorkspaceMode: runner.WorkspaceReadWrite}, true},
		{"reserved label", runner.SandboxSpec{Labels: map[string]string{"sandboxd.owner": "x"}}, false},
		{"tiny memory", runner.SandboxSpec{Limits: runner.Limits{MemoryBytes: 1 << 20}}, false},
	} {
		err := CheckSpec(&tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
