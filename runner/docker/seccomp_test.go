package docker

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestSeccompGolden pins the Docker seccomp JSON the runner sends (for
// amd64: the profile names the native architecture) for each network mode,
// under runc and under runsc; regenerate with go test ./runner/docker
// -run TestSeccompGolden -update.
func TestSeccompGolden(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skipf("golden files are for amd64, not %s", runtime.GOARCH)
	}
	for _, tc := range []struct {
		file    string
		network runner.NetworkMode
		gvisor  bool
	}{
		{"seccomp-none.json", runner.NetworkNone, false},
		{"seccomp-egress.json", runner.NetworkEgress, false},
		{"seccomp-gvisor-none.json", runner.NetworkNone, true},
		{"seccomp-gvisor-egress.json", runner.NetworkEgress, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			iso := runnertest.Isolation(runner.WorkspaceReadWrite, tc.network)
			opt, err := (&Runner{gvisor: tc.gvisor}).seccompOpt(iso)
			if err != nil {
				t.Fatal(err)
			}
			js := []byte(opt[len("seccomp="):])
			// The daemon reads the OCI form back (its JSON is a superset).
			var back specs.LinuxSeccomp
			if err := json.Unmarshal(js, &back); err != nil {
				t.Fatal(err)
			}
			want := iso.Seccomp
			if tc.gvisor {
				want = iso.SeccompGVisor
			}
			if wb, _ := json.Marshal(want); !bytes.Equal(wb, js) {
				t.Fatal("the JSON is not the isolation's profile")
			}
			var got bytes.Buffer
			if err := json.Indent(&got, js, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got.WriteByte('\n')
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./runner/docker -run TestSeccompGolden -update)", err)
			}
			if !bytes.Equal(got.Bytes(), golden) {
				t.Fatalf("%s drifted from what the runner sends; review and run with -update", path)
			}
		})
	}
}
