package policy

import (
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		effects []tools.Effect
		want    Isolation
	}{
		{nil, Isolation{Workspace: runner.WorkspaceNone, Network: runner.NetworkNone}},
		{[]tools.Effect{tools.EffectHTTP}, Isolation{Workspace: runner.WorkspaceNone, Network: runner.NetworkEgress, AllowInet: true}},
		{[]tools.Effect{tools.EffectExec}, Isolation{Sandbox: true, Workspace: runner.WorkspaceNone, Network: runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectFileRead}, Isolation{Sandbox: true, Workspace: runner.WorkspaceReadOnly, Network: runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectFileWrite}, Isolation{Sandbox: true, Workspace: runner.WorkspaceReadWrite, Network: runner.NetworkNone}},
		{[]tools.Effect{tools.EffectFileRead, tools.EffectExec, tools.EffectFileWrite}, Isolation{Sandbox: true, Workspace: runner.WorkspaceReadWrite, Network: runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectHTTP, tools.EffectFileRead}, Isolation{Sandbox: true, Workspace: runner.WorkspaceReadOnly, Network: runner.NetworkEgress, AllowInet: true}},
	} {
		if got := Compile(tc.effects); got != tc.want {
			t.Errorf("Compile(%v) = %+v, want %+v", tc.effects, got, tc.want)
		}
	}
}

// Each row of Table must change what Compile returns when its effect is
// added to any other effect set: a row the code ignores is a lie.
func TestEveryRowChangesIsolation(t *testing.T) {
	all := []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite, tools.EffectHTTP}
	if len(Table) != len(all) {
		t.Fatalf("Table has %d rows, want one per effect (%d)", len(Table), len(all))
	}
	for _, row := range Table {
		base := []tools.Effect{tools.EffectExec}
		if row.Effect == tools.EffectExec {
			base = nil
		}
		if row.Effect == tools.EffectFileRead {
			base = []tools.Effect{tools.EffectExec} // file_write would hide it
		}
		without, with := Compile(base), Compile(append(base, row.Effect))
		if without == with {
			t.Errorf("row %s: Compile(%v) == Compile(+%s) = %+v", row.Effect, base, row.Effect, with)
		}
		if row.Without == "" || row.With == "" {
			t.Errorf("row %s: empty description", row.Effect)
		}
		for i, e := range row.Enforced {
			if e == "" {
				t.Errorf("row %s: no enforcement named for runner %s", row.Effect, RunnerNames[i])
			}
		}
	}
}

func TestREADMECarriesTable(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), Markdown()) {
		t.Errorf("README.md does not contain policy.Markdown() verbatim; paste this:\n%s", Markdown())
	}
}
