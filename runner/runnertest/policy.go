package runnertest

import (
	wsfs "github.com/sandboxd/sandboxd/internal/workspace"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// testPolicyRows proves each row of policy.Table in a real sandbox: the
// spec comes from policy.Compile (as the job service builds it) and one
// probe per row checks what the effect grants and what its absence denies.
func (s *suite) testPolicyRows(t *testing.T) {
	// probe reports, one word per line: workspace readable, writable,
	// inet socket creatable, and whether a direct connection out worked.
	const probe = `import os, socket
out = []
try:
    out.append("read:" + open("/workspace/in.txt").read())
except OSError as e:
    out.append("read:no")
try:
    open("/workspace/out.txt", "w").write("w")
    out.append("write:yes")
except OSError:
    out.append("write:no")
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    out.append("inet:yes")
    s.settimeout(2)
    try:
        s.connect(("192.0.2.1", 80))  # TEST-NET-1: only a route out could reach it
        out.append("direct:yes")
    except OSError:
        out.append("direct:no")
except OSError:
    out.append("inet:no")
print(" ".join(out))`
	for _, tc := range []struct {
		name    string
		effects []tools.Effect
		want    []string // words the probe must print
	}{
		{"exec", []tools.Effect{tools.EffectExec}, []string{"read:no", "write:no", "inet:no"}},
		{"exec+file_read", []tools.Effect{tools.EffectExec, tools.EffectFileRead}, []string{"read:host", "write:no", "inet:no"}},
		{"exec+file_write", []tools.Effect{tools.EffectExec, tools.EffectFileWrite}, []string{"read:host", "write:yes", "inet:no"}},
		{"exec+http", []tools.Effect{tools.EffectExec, tools.EffectHTTP}, []string{"read:no", "write:no", "inet:yes", "direct:no"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iso := policy.Compile(tc.effects)
			if !iso.Sandbox {
				t.Fatalf("Compile(%v) needs no sandbox", tc.effects)
			}
			needsMounts := iso.Workspace != runner.WorkspaceReadWrite
			if needsMounts {
				s.need(t, s.caps.MountNamespace, "workspace modes (mount namespace)")
			}
			if iso.Network == runner.NetworkEgress {
				s.need(t, s.caps.Network, "egress (http effect)")
			} else {
				s.need(t, s.caps.Seccomp, "socket family filtering (seccomp)")
			}
			// As the job service does: a read-only sandbox mounts the
			// workspace's read-only view.
			ws, view := workspaceOf(t, wsfs.Limits{}, iso.Workspace == runner.WorkspaceReadOnly)
			if err := os.Chmod(ws, 0o777); err != nil { // only the mode may stop writes
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
			spec := runner.SandboxSpec{Workspace: view, WorkspaceMode: iso.Workspace, Network: iso.Network}
			if iso.Network == runner.NetworkEgress {
				spec.Egress = refuseEgress{}
			}
			sb := s.sandbox(t, spec)
			res := s.py(t, sb, probe)
			mustOK(t, res)
			got := strings.Fields(string(res.Stdout))
			for _, w := range tc.want {
				if !contains(got, w) {
					t.Errorf("effects %v: probe printed %q, want %q", tc.effects, res.Stdout, w)
				}
			}
			_, err := os.Stat(filepath.Join(ws, "out.txt"))
			if wrote := err == nil; wrote != (iso.Workspace == runner.WorkspaceReadWrite) {
				t.Errorf("effects %v: host sees a write in the workspace: %v", tc.effects, wrote)
			}
		})
	}
}

func contains(list []string, w string) bool {
	for _, x := range list {
		if x == w {
			return true
		}
	}
	return false
}

// refuseEgress is an egress endpoint that closes every connection.
type refuseEgress struct{}

func (refuseEgress) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}
