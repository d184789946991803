package runnertest

import (
	"encoding/json"
	"errors"
	"fmt"
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
			compiled := policy.Compile(tc.effects)
			if !compiled.Sandbox {
				t.Fatalf("Compile(%v) needs no sandbox", tc.effects)
			}
			iso := compiled.Spec
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
			spec := runner.SandboxSpec{Workspace: view, Isolation: iso}
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

// testNoIsolation: a spec without a compiled isolation is refused; no
// runner falls back to isolation of its own.
func (s *suite) testNoIsolation(t *testing.T) {
	sb, err := s.r.Create(t.Context(), runner.SandboxSpec{})
	if err == nil {
		sb.Close(t.Context())
		t.Fatal("Create without SandboxSpec.Isolation succeeded")
	}
	if !errors.Is(err, runner.ErrInvalidSpec) {
		t.Fatalf("Create without SandboxSpec.Isolation: %v, want ErrInvalidSpec", err)
	}
}

// testMaskedPaths: the isolation's masked paths read as nothing (an empty
// file or directory, or no access at all) and its read-only paths cannot be
// opened for writing, wherever the sandbox has them.
func (s *suite) testMaskedPaths(t *testing.T) {
	s.need(t, s.caps.MountNamespace, "masked paths (mount namespace)")
	iso := Isolation(runner.WorkspaceNone, runner.NetworkNone)
	sb := s.sandbox(t, runner.SandboxSpec{Isolation: iso})
	list := func(ps []string) string {
		b, _ := json.Marshal(ps)
		return string(b)
	}
	res := s.py(t, sb, fmt.Sprintf(`import os
masked, readonly = %s, %s
seen = 0
for p in masked:
    if not os.path.lexists(p):
        continue
    seen += 1
    try:
        if os.path.isdir(p):
            got = os.listdir(p)
        else:
            with open(p, "rb") as f:
                got = f.read(64)
        if got:
            print("EXPOSED", p, repr(got)[:60])
    except OSError:
        pass
for p in readonly:
    target = p
    if os.path.isdir(p):
        target = os.path.join(p, "kernel", "hostname") if p.endswith("/sys") else None
    if target is None or not os.path.exists(target):
        continue
    try:
        os.close(os.open(target, os.O_WRONLY))
        print("WRITABLE", target)
    except OSError:
        pass
print("SEEN", seen)`, list(iso.MaskedPaths), list(iso.ReadonlyPaths)))
	mustOK(t, res)
	out := string(res.Stdout)
	if strings.Contains(out, "EXPOSED") || strings.Contains(out, "WRITABLE") {
		t.Fatalf("masked or read-only paths reachable:\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(out))
}
