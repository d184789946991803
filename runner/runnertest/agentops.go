package runnertest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// What a sandbox with the agent (runner.AgentSandbox) gives beyond Exec,
// checked on every runner that has one: the persistent Python REPL (state
// between cells, the last expression's value, an interrupted runaway cell,
// matplotlib figures as PNG artifacts) and file operations confined to the
// workspace.

func (s *suite) agentSandbox(t *testing.T, spec runner.SandboxSpec) (runner.Sandbox, *agent.Client) {
	t.Helper()
	sb := s.sandbox(t, spec)
	as, ok := sb.(runner.AgentSandbox)
	s.need(t, ok, "the sandbox agent (runner.AgentSandbox)")
	return sb, as.Agent()
}

// pull brings what the agent changed in sb's workspace to the host, for
// a sandbox whose workspace is a copy (runner.WorkspaceSyncer; on the
// others it is the host directory itself), as the job service does after
// each agent call; push the other way, as it does before.
func pull(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	if ws, ok := sb.(runner.WorkspaceSyncer); ok {
		if err := ws.PullWorkspace(t.Context()); err != nil {
			t.Fatalf("PullWorkspace: %v", err)
		}
	}
}

func push(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	if ws, ok := sb.(runner.WorkspaceSyncer); ok {
		if err := ws.PushWorkspace(t.Context()); err != nil {
			t.Fatalf("PushWorkspace: %v", err)
		}
	}
}

// testWorkspaceSync: the host's workspace and the sandbox's are one, up
// to the sync points of a sandbox whose workspace is a copy: a file put
// on the host after Create, a change and a deletion reach the next Exec;
// what the code writes, changes, deletes and the directories it makes
// reach the host after the Exec (or, through the agent, after a pull);
// files untouched on one side are not overwritten by the other's stale
// copy.
func (s *suite) testWorkspaceSync(t *testing.T) {
	ws := workspace(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("host 0"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("x"), 0o644))
	sb, c := s.agentSandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	// Host changes after Create: a new file in a new directory, a change
	// of the same size, a deletion.
	must(os.MkdirAll(filepath.Join(ws, "up"), 0o755))
	must(os.WriteFile(filepath.Join(ws, "up", "new.txt"), []byte("uploaded"), 0o644))
	if os.Geteuid() == 0 { // as the job service gives uploads to the code's user
		for _, p := range []string{"up", "up/new.txt"} {
			must(os.Lchown(filepath.Join(ws, p), policy.CodeUID, policy.CodeGID))
		}
	}
	must(os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("host 1"), 0o644))
	must(os.Remove(filepath.Join(ws, "gone.txt")))
	res := s.sh(t, sb, "cat up/new.txt keep.txt; ls gone.txt 2>/dev/null; echo code > made.txt; mkdir -p d/e; echo deep > d/e/f.txt; echo changed > up/new.txt; rm keep.txt")
	mustOK(t, res)
	if string(res.Stdout) != "uploadedhost 1" {
		t.Errorf("the sandbox saw %q; want the host's changes (\"uploadedhost 1\", no gone.txt)", res.Stdout)
	}
	for p, want := range map[string]string{"made.txt": "code\n", "d/e/f.txt": "deep\n", "up/new.txt": "changed\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("host %s: %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "keep.txt")); !os.IsNotExist(err) {
		t.Errorf("host keep.txt after the code removed it: %v", err)
	}
	// Through the agent: a write and a removal reach the host after a
	// pull; a host change after it reaches the agent after a push, and
	// what only the sandbox changed meanwhile is kept.
	must(c.WriteFile(t.Context(), "agent.txt", []byte("agent"), 0o644))
	must(c.Remove(t.Context(), "d", true))
	pull(t, sb)
	if b, err := os.ReadFile(filepath.Join(ws, "agent.txt")); err != nil || string(b) != "agent" {
		t.Errorf("host agent.txt: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "d")); !os.IsNotExist(err) {
		t.Errorf("host d/ after the agent removed it: %v", err)
	}
	must(os.WriteFile(filepath.Join(ws, "made.txt"), []byte("host again"), 0o644))
	must(c.WriteFile(t.Context(), "agent.txt", []byte("agent again"), 0o644))
	push(t, sb)
	if b, err := c.ReadFile(t.Context(), "made.txt", 1<<20); err != nil || string(b) != "host again" {
		t.Errorf("sandbox made.txt after a host change: %q, %v", b, err)
	}
	if b, err := c.ReadFile(t.Context(), "agent.txt", 1<<20); err != nil || string(b) != "agent again" {
		t.Errorf("sandbox agent.txt, changed only in the sandbox, after a push: %q, %v", b, err)
	}
	pull(t, sb)
	if b, err := os.ReadFile(filepath.Join(ws, "agent.txt")); err != nil || string(b) != "agent again" {
		t.Errorf("host agent.txt: %q, %v", b, err)
	}
}

func (s *suite) repl(t *testing.T, c *agent.Client, code string) agent.REPLResult {
	t.Helper()
	r, err := c.REPL(t.Context(), replRequest(code), nil)
	if err != nil {
		t.Fatalf("REPL %q: %v", code, err)
	}
	return r
}

// testREPLState: globals and imports survive between cells, the last
// expression's repr is the value, an exception fails only its cell, and
// the interpreter sees the workspace an Exec wrote.
func (s *suite) testREPLState(t *testing.T) {
	ws := workspace(t)
	sb, c := s.agentSandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if r := s.repl(t, c, "import json\nx = 41\nprint('set')"); !r.OK || r.Stdout != "set\n" || r.Value != "" {
		t.Fatalf("first cell: %+v", r)
	}
	if r := s.repl(t, c, "json.dumps({'x': x + 1})"); !r.OK || r.Value != `'{"x": 42}'` {
		t.Fatalf("globals and imports did not persist: %+v", r)
	}
	if r := s.repl(t, c, "undefined_name"); r.OK || !strings.Contains(r.Error+r.Stderr, "NameError") {
		t.Fatalf("an exception is a failed cell with its traceback: %+v", r)
	}
	mustOK(t, s.sh(t, sb, "echo from-exec > note.txt"))
	if r := s.repl(t, c, "x, open('note.txt').read()"); !r.OK || r.Value != `(41, 'from-exec\n')` || r.Restarted {
		t.Fatalf("state after an exception and an Exec: %+v", r)
	}
}

// testREPLInterrupt: a runaway cell is interrupted at its timeout and the
// interpreter keeps its globals.
func (s *suite) testREPLInterrupt(t *testing.T) {
	_, c := s.agentSandbox(t, runner.SandboxSpec{})
	s.repl(t, c, "x = 7")
	start := time.Now()
	r, err := c.REPL(t.Context(), agent.REPLRequest{Code: "while True: pass", Timeout: time.Second, OutputLimit: 1 << 20}, nil)
	if err != nil || !r.TimedOut || r.OK {
		t.Fatalf("runaway cell: %v %+v", err, r)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("runaway cell took %v", el)
	}
	if r := s.repl(t, c, "x * 6"); !r.OK || r.Value != "42" || r.Restarted {
		t.Fatalf("state lost after an interrupted cell: %+v", r)
	}
}

// testREPLArtifacts: a matplotlib figure left open becomes a PNG
// artifact.
func (s *suite) testREPLArtifacts(t *testing.T) {
	_, c := s.agentSandbox(t, runner.SandboxSpec{})
	if r := s.repl(t, c, "import matplotlib"); !r.OK {
		if os.Getenv("SANDBOXD_REQUIRE_TOOLS") == "" && strings.Contains(r.Error+r.Stderr, "ModuleNotFoundError") {
			t.Skipf("no matplotlib in the sandbox's Python (set SANDBOXD_REQUIRE_TOOLS=1 to fail instead): %s", r.Error)
		}
		t.Fatalf("import matplotlib: %+v", r)
	}
	r := s.repl(t, c, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
	if !r.OK || len(r.Artifacts) != 1 || r.Artifacts[0].MimeType != "image/png" || !bytes.HasPrefix(r.Artifacts[0].Data, []byte("\x89PNG")) {
		t.Fatalf("figure: ok=%v error=%q artifacts=%d", r.OK, r.Error, len(r.Artifacts))
	}
	if r := s.repl(t, c, "1 + 1"); !r.OK || len(r.Artifacts) != 0 {
		t.Fatalf("a closed figure came back: %+v", r)
	}
}

// testAgentFiles: the agent's file operations act on the workspace the
// sandbox sees, and nothing outside it.
func (s *suite) testAgentFiles(t *testing.T) {
	ws := workspace(t)
	sb, c := s.agentSandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	ctx := t.Context()
	if err := c.WriteFile(ctx, "d/in.txt", []byte("from agent"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := s.sh(t, sb, "cat /workspace/d/in.txt && echo ' and exec' >> d/in.txt && mkdir d/sub && ln -s /etc/passwd d/link")
	mustOK(t, res)
	if string(res.Stdout) != "from agent" {
		t.Errorf("exec read %q", res.Stdout)
	}
	if b, err := c.ReadFile(ctx, "/workspace/d/in.txt", 1<<20); err != nil || string(b) != "from agent and exec\n" {
		t.Errorf("ReadFile: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "d", "in.txt")); string(b) != "from agent and exec\n" {
		t.Errorf("host sees %q", b)
	}
	files, err := c.ListDir(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"in.txt", "link", "sub"}) {
		t.Errorf("ListDir: %v", names)
	}
	if fi, err := c.Stat(ctx, "d/sub"); err != nil || !fi.IsDir {
		t.Errorf("Stat: %+v %v", fi, err)
	}
	// Nothing outside the workspace: not through "..", an absolute path
	// or a symlink the code planted.
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "d/link", "/run/sandboxd/agent.sock"} {
		if b, err := c.ReadFile(ctx, p, 1<<20); err == nil {
			t.Errorf("ReadFile(%q) outside the workspace: %q", p, b)
		}
	}
	if err := c.WriteFile(ctx, "d/link", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile through a symlink out of the workspace succeeded")
	}
	if err := c.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	pull(t, sb)
	if _, err := os.Stat(filepath.Join(ws, "d")); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v", err)
	}
	// A read-only workspace stays read-only to the agent too.
	ro := workspace(t)
	_, rc := s.agentSandbox(t, runner.SandboxSpec{Workspace: ro, Isolation: Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)})
	if err := rc.WriteFile(ctx, "x.txt", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile in a read-only workspace succeeded")
	}
	if _, err := os.Stat(filepath.Join(ro, "x.txt")); !os.IsNotExist(err) {
		t.Errorf("read-only workspace changed: %v", err)
	}
}
