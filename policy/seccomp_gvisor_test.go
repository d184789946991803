package policy

import (
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// The gVisor variant differs from the profile in exactly one way: clone3
// is allowed instead of refused with ENOSYS.
func TestSeccompGVisor(t *testing.T) {
	for _, inet := range []bool{false, true} {
		base, err := SeccompOCI(inet, false)
		if err != nil {
			t.Fatal(err)
		}
		gv, err := SeccompOCI(inet, true)
		if err != nil {
			t.Fatal(err)
		}
		action := func(sc *specs.LinuxSeccomp, name string) []specs.LinuxSeccompAction {
			var out []specs.LinuxSeccompAction
			for _, r := range sc.Syscalls {
				if slices.Contains(r.Names, name) {
					out = append(out, r.Action)
				}
			}
			return out
		}
		if got := action(base, "clone3"); !slices.Equal(got, []specs.LinuxSeccompAction{specs.ActErrno}) {
			t.Fatalf("inet %v: clone3 in the profile: %v, want errno", inet, got)
		}
		if got := action(gv, "clone3"); !slices.Equal(got, []specs.LinuxSeccompAction{specs.ActAllow}) {
			t.Fatalf("inet %v: clone3 in the gVisor profile: %v, want allow", inet, got)
		}
		if len(base.Syscalls) != len(gv.Syscalls) || base.DefaultAction != gv.DefaultAction {
			t.Fatalf("inet %v: the gVisor profile differs beyond clone3", inet)
		}
		for _, name := range []string{"ptrace", "bpf", "keyctl", "mount", "unshare", "io_uring_setup"} {
			if !slices.Equal(action(base, name), action(gv, name)) {
				t.Errorf("inet %v: %s differs: %v vs %v", inet, name, action(base, name), action(gv, name))
			}
		}
	}
}
