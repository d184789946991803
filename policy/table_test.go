package policy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

func TestCompile(t *testing.T) {
	type want struct {
		sandbox bool
		ws      runner.WorkspaceMode
		network runner.NetworkMode
	}
	for _, tc := range []struct {
		effects []tools.Effect
		want    want
	}{
		{nil, want{false, runner.WorkspaceNone, runner.NetworkNone}},
		{[]tools.Effect{tools.EffectHTTP}, want{false, runner.WorkspaceNone, runner.NetworkEgress}},
		{[]tools.Effect{tools.EffectExec}, want{true, runner.WorkspaceNone, runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectFileRead}, want{true, runner.WorkspaceReadOnly, runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectFileWrite}, want{true, runner.WorkspaceReadWrite, runner.NetworkNone}},
		{[]tools.Effect{tools.EffectFileRead, tools.EffectExec, tools.EffectFileWrite}, want{true, runner.WorkspaceReadWrite, runner.NetworkNone}},
		{[]tools.Effect{tools.EffectExec, tools.EffectHTTP, tools.EffectFileRead}, want{true, runner.WorkspaceReadOnly, runner.NetworkEgress}},
	} {
		got := Compile(tc.effects)
		iso := got.Spec
		if got.Sandbox != tc.want.sandbox || iso.Workspace != tc.want.ws || iso.Network != tc.want.network {
			t.Errorf("Compile(%v) = sandbox %v %s/%s, want %+v", tc.effects, got.Sandbox, iso.Workspace, iso.Network, tc.want)
		}
		// The seccomp profile goes with the network: inet sockets only
		// with http, the same profile for every workspace mode.
		if want := nativeProfile(tc.want.network == runner.NetworkEgress); !reflect.DeepEqual(iso.Seccomp, want) || !reflect.DeepEqual(iso.SeccompGVisor, seccompGVisor(want)) {
			t.Errorf("Compile(%v): seccomp profile is not the policy's for network %s", tc.effects, tc.want.network)
		}
		if !slices.Equal(iso.MaskedPaths, maskedPaths) || !slices.Equal(iso.ReadonlyPaths, readonlyPaths) {
			t.Errorf("Compile(%v): masked %v read-only %v", tc.effects, iso.MaskedPaths, iso.ReadonlyPaths)
		}
		if again := Compile(tc.effects); again != got {
			t.Errorf("Compile(%v) is not one shared value", tc.effects)
		}
	}
	if a, b := Compile([]tools.Effect{tools.EffectExec}).Spec, Compile([]tools.Effect{tools.EffectExec, tools.EffectFileWrite}).Spec; a.Seccomp != b.Seccomp {
		t.Error("equal seccomp profiles are not shared")
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
