package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestSeccompGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		inet bool
	}{{"seccomp-inet.json", true}, {"seccomp-noinet.json", false}} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			got, err := SeccompProfile(tc.inet)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := SeccompProfile(tc.inet)
			if !bytes.Equal(got, again) {
				t.Fatal("SeccompProfile is not deterministic")
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./policy -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s drifted from SeccompProfile(%v); review and run go test ./policy -update", path, tc.inet)
			}
		})
	}
}

func TestSeccompTightened(t *testing.T) {
	t.Parallel()
	for _, inet := range []bool{false, true} {
		b, err := SeccompProfile(inet)
		if err != nil {
			t.Fatal(err)
		}
		var p seccomp.Seccomp
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		for _, a := range p.ArchMap {
			if len(a.SubArches) != 0 {
				t.Errorf("inet=%v: %s keeps compat arches %v", inet, a.Arch, a.SubArches)
			}
		}
		var domains []uint64
		for _, sc := range p.Syscalls {
			for _, n := range sc.Names {
				if slices.Contains(deniedSyscalls, n) && sc.Action != "SCMP_ACT_ERRNO" {
					t.Errorf("inet=%v: %s has action %s", inet, n, sc.Action)
				}
				if n == "socket" {
					if len(sc.Args) != 1 || sc.Args[0].Index != 0 || sc.Args[0].Op != "SCMP_CMP_EQ" || sc.Action != "SCMP_ACT_ALLOW" {
						t.Errorf("inet=%v: unconditional or odd socket rule %+v", inet, sc)
						continue
					}
					domains = append(domains, sc.Args[0].Value)
				}
			}
		}
		for _, bad := range []uint64{unix.AF_ALG, unix.AF_VSOCK, unix.AF_PACKET} {
			if slices.Contains(domains, bad) {
				t.Errorf("inet=%v: socket domain %d allowed", inet, bad)
			}
		}
		if !slices.Contains(domains, unix.AF_UNIX) {
			t.Errorf("inet=%v: AF_UNIX not allowed", inet)
		}
		if got := slices.Contains(domains, unix.AF_INET); got != inet {
			t.Errorf("inet=%v: AF_INET allowed = %v", inet, got)
		}
	}
}
