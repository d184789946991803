package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestSeccompOCIGolden pins the OCI form (as resolved for amd64 without
// capabilities) in testdata; regenerate with go test ./policy -update.
func TestSeccompOCIGolden(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skipf("golden files are for amd64, not %s", runtime.GOARCH)
	}
	for _, tc := range []struct {
		file string
		inet bool
	}{{"seccomp-oci-inet.json", true}, {"seccomp-oci-noinet.json", false}} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			sc, err := SeccompOCI(tc.inet, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(sc, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
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
				t.Fatalf("%s drifted from SeccompOCI(%v); review and run go test ./policy -update", path, tc.inet)
			}
		})
	}
}

func TestSeccompOCITightened(t *testing.T) {
	t.Parallel()
	for _, inet := range []bool{false, true} {
		sc, err := SeccompOCI(inet, false)
		if err != nil {
			t.Fatal(err)
		}
		if sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != uint(unix.EPERM) {
			t.Errorf("inet=%v: default %s errno %v", inet, sc.DefaultAction, sc.DefaultErrnoRet)
		}
		if len(sc.Architectures) != 1 {
			t.Errorf("inet=%v: architectures %v, want only the native one", inet, sc.Architectures)
		}
		var domains []uint64
		for _, r := range sc.Syscalls {
			for _, n := range r.Names {
				if slices.Contains(deniedSyscalls, n) && r.Action != specs.ActErrno {
					t.Errorf("inet=%v: %s has action %s", inet, n, r.Action)
				}
				// Capability-gated rules of the Docker profile must be gone.
				if r.Action == specs.ActAllow && slices.Contains([]string{"mount", "unshare", "setns", "bpf", "ptrace", "reboot", "init_module", "chroot"}, n) {
					t.Errorf("inet=%v: %s allowed", inet, n)
				}
				if n == "socket" {
					if len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo || r.Action != specs.ActAllow {
						t.Errorf("inet=%v: unconditional or odd socket rule %+v", inet, r)
						continue
					}
					domains = append(domains, r.Args[0].Value)
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
