//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api/client"
	"github.com/sandboxd/sandboxd/api/wire"
)

const clientsConfig = `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      rules:
        - tool: calculator
          action: confirm
          reason: a human checks the sums
`

// TestGoClient drives a real sandboxd (the local runner) through
// api/client only: tools in each format, a session's REPL keeping state, a
// PNG artifact downloaded, a job's events streamed, workspace files and
// archives, an approval, a model turn, and the error paths (bad key,
// unknown tool, invalid arguments, a timeout).
func TestGoClient(t *testing.T) {
	s := startServer(t, clientsConfig)
	ctx := t.Context()
	c := client.New(s.URL, "k-acme", nil)

	_, err := client.New(s.URL, "wrong", nil).ToolList(ctx)
	if client.ErrorCode(err) != "unauthorized" {
		t.Fatalf("bad key: %v", err)
	}
	list, err := c.ToolList(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("tools: %v %v", list, err)
	}
	for _, f := range []string{"openai", "anthropic", "mcp"} {
		raw, err := c.Tools(ctx, f)
		if err != nil || len(raw) != len(list) {
			t.Fatalf("tools %s: %d %v", f, len(raw), err)
		}
	}
	if one, err := c.Tool(ctx, "python_repl", "openai"); err != nil || !bytes.Contains(one, []byte(`"function"`)) {
		t.Fatalf("tool python_repl openai: %s %v", one, err)
	}

	_, err = c.Submit(ctx, client.SubmitRequest{Tool: "no_such_tool"}, 0)
	if client.ErrorCode(err) != "unknown_tool" {
		t.Fatalf("unknown tool: %v", err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Tool: "python_repl", Arguments: []byte(`{"code": 5}`)}, 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || len(ae.Details) == 0 {
		t.Fatalf("invalid arguments: %v", err)
	}

	ses, err := c.CreateSession(ctx, client.SessionRequest{Effects: []wire.Effect{"exec", "file_read", "file_write"}})
	if err != nil || ses.State != wire.SessionActive {
		t.Fatalf("create session: %+v %v", ses, err)
	}
	run := func(tool string, args string) *wire.Job {
		t.Helper()
		j, err := c.Submit(ctx, client.SubmitRequest{Tool: tool, Arguments: []byte(args), SessionID: ses.ID}, time.Minute)
		if err == nil && !j.State.Terminal() {
			j, err = c.Wait(ctx, j.ID)
		}
		if err != nil || j.Result == nil {
			t.Fatalf("%s %s: %+v %v", tool, args, j, err)
		}
		return j
	}
	run("python_repl", `{"code": "acc = 40"}`)
	if j := run("python_repl", `{"code": "acc + 2"}`); !j.Result.OK || j.Result.Content != "42\n" || j.Result.Value != "42" {
		t.Fatalf("REPL state: %+v", j.Result)
	}
	j := run("python_repl", `{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"}`)
	if len(j.Result.Artifacts) != 1 {
		t.Fatalf("figure: %+v", j.Result)
	}
	png, mime, err := c.Artifact(ctx, j.ID, j.Result.Artifacts[0].Name)
	if err != nil || mime != "image/png" || !bytes.HasPrefix(png, []byte("\x89PNG")) || int64(len(png)) != j.Result.Artifacts[0].Size {
		t.Fatalf("artifact: %q %d bytes %v", mime, len(png), err)
	}
	j = run("python_repl", `{"code": "while True: pass", "timeout_seconds": 1}`)
	if j.Result.OK || j.Reason != "timeout" {
		t.Fatalf("timeout: %s %+v", j.Reason, j.Result)
	}

	// Events of a job printing on both streams, streamed while it runs.
	q, err := c.Submit(ctx, client.SubmitRequest{Tool: "bash", Arguments: []byte(`{"command": "echo one; sleep 0.3; echo two >&2"}`), SessionID: ses.ID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var out strings.Builder
	for ev, err := range c.Events(ctx, q.ID, -1) {
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		types = append(types, ev.Type)
		out.WriteString(ev.Data)
	}
	if types[0] != wire.EventQueued || types[len(types)-1] != wire.EventFinished || !strings.Contains(out.String(), "one\n") || !strings.Contains(out.String(), "two\n") {
		t.Fatalf("events: %v %q", types, out.String())
	}
	if tl, err := c.Timeline(ctx, q.ID); err != nil || tl.State != wire.StateSucceeded || len(tl.Entries) < 3 {
		t.Fatalf("timeline: %+v %v", tl, err)
	}

	// Workspace files and archives.
	if fi, err := c.PutFile(ctx, ses.ID, "dir/a.txt", strings.NewReader("hello")); err != nil || fi.Size != 5 {
		t.Fatalf("put file: %+v %v", fi, err)
	}
	if data, err := c.ReadFile(ctx, ses.ID, "dir/a.txt"); err != nil || string(data) != "hello" {
		t.Fatalf("read file: %q %v", data, err)
	}
	if entries, err := c.ListFiles(ctx, ses.ID, "dir"); err != nil || len(entries) != 1 || entries[0].Name != "a.txt" {
		t.Fatalf("list files: %+v %v", entries, err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "b.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("bee"))
	tw.Close()
	if n, err := c.PutArchive(ctx, ses.ID, "dir", &tb); err != nil || n != 1 {
		t.Fatalf("put archive: %d %v", n, err)
	}
	rc, err := c.GetArchive(ctx, ses.ID, "dir")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("archive: %v", err)
			}
			break
		}
		names[strings.TrimPrefix(h.Name, "./")] = true
	}
	rc.Close()
	if !names["a.txt"] || !names["b.txt"] {
		t.Fatalf("archive entries: %v", names)
	}
	if _, err := c.ReadFile(ctx, ses.ID, "../etc/passwd"); err == nil {
		t.Fatal("a path out of the workspace was read")
	}

	// A model turn (OpenAI Chat Completions) in the session.
	turn := `{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"dir/b.txt\"}"}}]}`
	tn, err := c.PostTurn(ctx, []byte(turn), client.TurnOptions{SessionID: ses.ID, Wait: time.Minute, IdempotencyKey: "turn-1"})
	if err != nil || !tn.Completed() || len(tn.Messages) != 1 || !bytes.Contains(tn.Messages[0], []byte("bee")) || tn.Calls[0].CallID != "call_1" {
		t.Fatalf("turn: %+v %v", tn, err)
	}
	if again, err := c.GetTurn(ctx, tn.ID, 0); err != nil || again.ID != tn.ID || !again.Completed() {
		t.Fatalf("get turn: %+v %v", again, err)
	}

	// An approval: calculator needs a human.
	a, err := c.Submit(ctx, client.SubmitRequest{Tool: "calculator", Arguments: []byte(`{"expression": "6*7"}`)}, 0)
	if err != nil || a.State != wire.StatePendingApproval {
		t.Fatalf("calculator: %+v %v", a, err)
	}
	pending, _, err := c.ListApprovals(ctx, client.ApprovalListOptions{State: "pending"})
	if err != nil || len(pending) != 1 || pending[0].JobID != a.ID {
		t.Fatalf("approvals: %+v %v", pending, err)
	}
	if got, err := c.GetApproval(ctx, pending[0].ID); err != nil || got.Tool != "calculator" {
		t.Fatalf("get approval: %+v %v", got, err)
	}
	if d, err := c.DecideApproval(ctx, pending[0].ID, true, "fine"); err != nil || d.State != "approved" {
		t.Fatalf("approve: %+v %v", d, err)
	}
	if done, err := c.Wait(ctx, a.ID); err != nil || !done.Result.OK || !strings.Contains(done.Result.Content, "42") {
		t.Fatalf("approved calculator: %+v %v", done, err)
	}

	jobs, _, err := c.List(ctx, client.ListOptions{Session: ses.ID, Limit: 100})
	if err != nil || len(jobs) < 6 {
		t.Fatalf("list session jobs: %d %v", len(jobs), err)
	}
	if got, err := c.GetSession(ctx, ses.ID); err != nil || got.ID != ses.ID {
		t.Fatalf("get session: %+v %v", got, err)
	}
	if closed, err := c.DeleteSession(ctx, ses.ID); err != nil || closed.State != wire.SessionClosed {
		t.Fatalf("delete session: %+v %v", closed, err)
	}
	if _, err := c.GetSession(ctx, "ses_missing"); !client.IsNotFound(err) {
		t.Fatalf("missing session: %v", err)
	}
}

// readmeExample is the first ```lang block after the README's line
// heading.
func readmeExample(t *testing.T, heading, lang string) string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	s = s[i:]
	start := strings.Index(s, "\n```"+lang+"\n")
	if start < 0 {
		t.Fatalf("README: no %s block after %q", lang, heading)
	}
	s = s[start+len("\n```"+lang+"\n"):]
	end := strings.Index(s, "\n```\n")
	if end < 0 {
		t.Fatalf("README: unterminated %s block after %q", lang, heading)
	}
	return s[:end+1]
}

// TestReadmeGoExample runs the README's Go client example against a real
// sandboxd.
func TestReadmeGoExample(t *testing.T) {
	s := startServer(t, clientsConfig)
	dir, err := os.MkdirTemp("..", "_readme_example_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(readmeExample(t, "### Go (`api/client`)", "go")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./"+filepath.Base(dir))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "SANDBOXD_URL="+s.URL, "SANDBOXD_API_KEY=k-acme")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("README Go example: %v\n%s", err, out)
	}
}

// pythonVenv makes a virtual environment of Debian's python with the
// client installed from a copy of clients/python (so that the build leaves
// nothing in the tree), as the README says.
func pythonVenv(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatalf("Debian's python3: %v (scripts/setup.sh)", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if out, err := exec.Command("cp", "-r", "../clients/python", src).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	for _, p := range []string{"build", "src/sandboxd.egg-info"} {
		os.RemoveAll(filepath.Join(src, p))
	}
	venv := filepath.Join(dir, "V")
	start := time.Now()
	for _, args := range [][]string{
		{"/usr/bin/python3", "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin/pip"), "install", "-q", "--no-build-isolation", "--no-index", src},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	t.Logf("venv and pip install took %s", time.Since(start).Round(time.Millisecond))
	return filepath.Join(venv, "bin/python")
}

// TestPythonClient installs the Python client into a venv of Debian's
// python3 and runs its tests (clients/python/tests) against a real
// sandboxd: run_code's value, streams, callbacks, exception and PNG,
// files, tools, events and turns, a timeout, and the error paths (bad key,
// unknown tool, validation error); then the README's example.
func TestPythonClient(t *testing.T) {
	py := pythonVenv(t)
	s := startServer(t, clientsConfig)
	env := append(os.Environ(), "SANDBOXD_URL="+s.URL, "SANDBOXD_API_KEY=k-acme", "PYTHONDONTWRITEBYTECODE=1")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(py, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if where := run("-c", "import sandboxd; print(sandboxd.__file__)"); !strings.Contains(where, "/V/lib/") {
		t.Fatalf("sandboxd imported from %s, not the venv", where)
	}
	// Typed: mypy --strict (Debian's python3-mypy) finds nothing.
	mypy := exec.Command("/usr/bin/python3", "-m", "mypy", "--strict", "--no-incremental", "src")
	mypy.Dir = "../clients/python"
	if out, err := mypy.CombinedOutput(); err != nil {
		t.Fatalf("mypy --strict clients/python/src: %v\n%s", err, out)
	}
	out := run("-m", "unittest", "discover", "-v", "-s", "../clients/python/tests")
	if !strings.Contains(out, "OK") || strings.Contains(out, "skipped") {
		t.Fatalf("python tests:\n%s", out)
	}
	t.Logf("python tests:\n%s", out)
	example := filepath.Join(t.TempDir(), "example.py")
	os.WriteFile(example, []byte(readmeExample(t, "### Python (`clients/python`)", "python")), 0o644)
	if out := run(example); out != "mean 2.8\n5\n5\n5\n1 figure\n" {
		t.Fatalf("README Python example printed:\n%s", out)
	}
}

// TestTypeScriptClient compiles clients/typescript with tsc and runs its
// tests with node --test against a real sandboxd, the LangChain.js adapter
// with the real @langchain/core from npm; then the README's example,
// importing the package by its name.
func TestTypeScriptClient(t *testing.T) {
	dir := npmInstall(t, "../clients/typescript")
	s := startServer(t, clientsConfig)
	env := append(os.Environ(), "SANDBOXD_URL="+s.URL, "SANDBOXD_API_KEY=k-acme")
	cmd := exec.Command("node", "--test", "dist/test/")
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\n# fail 0\n") || strings.Contains(string(out), "\n# pass 0\n") {
		t.Fatalf("node --test: %v\n%s", err, out)
	}

	ex := t.TempDir()
	os.MkdirAll(filepath.Join(ex, "node_modules"), 0o755)
	if err := os.Symlink(dir, filepath.Join(ex, "node_modules", "sandboxd")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ex, "package.json"), []byte(`{"type": "module"}`), 0o644)
	os.WriteFile(filepath.Join(ex, "example.ts"), []byte(readmeExample(t, "### TypeScript (`clients/typescript`)", "ts")), 0o644)
	tsc := exec.Command(filepath.Join(dir, "node_modules", ".bin", "tsc"), "--strict", "--target", "es2022", "--module", "nodenext",
		"--moduleResolution", "nodenext", "--types", "node", "--typeRoots", filepath.Join(dir, "node_modules", "@types"), "example.ts")
	tsc.Dir = ex
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc README example: %v\n%s", err, out)
	}
	run := exec.Command("node", "example.js")
	run.Dir, run.Env = ex, env
	if out, err := run.CombinedOutput(); err != nil || string(out) != "5 \"mean 2.8\\n5\\n\"\n14\n\n" {
		t.Fatalf("README TypeScript example: %v\n%s", err, out)
	}
}
