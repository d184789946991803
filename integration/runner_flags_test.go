//go:build integration

package integration

import (
	"os"
	"strings"
	"testing"
)

// TestServeRunnerFlags: `sandboxd serve --runner NAME [--runtime runsc]`,
// with no config file, runs jobs on that runner and runtime. gVisor shows
// itself by its own kernel: /proc/version inside differs from the host's.
func TestServeRunnerFlags(t *testing.T) {
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		runner string
		gvisor bool
	}{
		{"containerd", []string{"--runner", "containerd"}, "containerd", false},
		{"containerd-runsc", []string{"--runner", "containerd", "--runtime", "runsc"}, "containerd", true},
		{"docker-runsc", []string{"--runner", "docker", "--runtime", "runsc"}, "docker", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.runner == "docker" {
				needDocker(t)
			}
			s := startServerArgs(t, "", tc.args...)
			var j struct {
				State  string
				Runner string
				Result struct {
					OK      bool
					Content string
				}
			}
			resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{
				"tool": "python_repl", "arguments": map[string]any{"code": "print(open('/proc/version').read().strip())"},
			}, &j)
			if resp.StatusCode != 200 || j.State != "succeeded" || !j.Result.OK {
				t.Fatalf("job: %d %s", resp.StatusCode, data)
			}
			if j.Runner != tc.runner {
				t.Fatalf("job ran on %q, want %q", j.Runner, tc.runner)
			}
			inside := strings.TrimSpace(j.Result.Content)
			host := strings.TrimSpace(string(hostVersion))
			if gv := inside != host; gv != tc.gvisor {
				t.Fatalf("/proc/version inside %q, host %q: gVisor %v, want %v", inside, host, gv, tc.gvisor)
			}
		})
	}
}
