package custom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// hostSandbox runs commands on the host: a test double for RunCommand
// (no isolation; unit tests only).
type hostSandbox struct{ runs int }

func (h *hostSandbox) RunCommand(ctx context.Context, cmd tools.Command, effects []tools.Effect, _ string) (tools.Result, error) {
	h.runs++
	return runHost(ctx, cmd, effects)
}

func runHost(ctx context.Context, cmd tools.Command, effects []tools.Effect) (tools.Result, error) {
	c := exec.CommandContext(ctx, cmd.Args[0], cmd.Args[1:]...)
	c.Env = cmd.Env
	c.Stdin = bytes.NewReader(cmd.Stdin)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return tools.Result{}, err
	}
	r := tools.FromProcess(tools.ProcessInfo{ExitCode: code, Stdout: out.String(), Stderr: errb.String()}, effects, time.Since(start))
	if cmd.Decode != nil {
		r = cmd.Decode(r)
	}
	return r, nil
}

func TestArgvTemplate(t *testing.T) {
	t.Parallel()
	props := map[string]bool{"path": true, "limit": true, "deep": true, "n": true}
	tmpl, err := parseArgv([]string{"/usr/bin/find", "{path}", "--max={limit}", "-deep={deep}", "{{literal}}", "x{n}y"}, props)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.expand(map[string]any{"path": "a b; rm -rf / $(id) `x` 'q\"", "deep": true, "n": 3.0})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/bin/find", "a b; rm -rf / $(id) `x` 'q\"", "-deep=true", "{literal}", "x3y"}
	if !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	got, _ = tmpl.expand(map[string]any{"path": "p", "limit": 2.5, "n": []any{1.0, "a"}})
	if want := []string{"/usr/bin/find", "p", "--max=2.5", "{literal}", `x[1,"a"]y`}; !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	for _, bad := range [][]string{{"/bin/x", "{nope}"}, {"{path}"}, {"/bin/x", "{path"}, {"/bin/x", "a}b"}, {"/bin/x", "{}"}} {
		if _, err := parseArgv(bad, props); err == nil {
			t.Errorf("parseArgv(%q) accepted", bad)
		}
	}
	if _, err := tmpl.expand(map[string]any{"path": "a\x00b"}); err == nil {
		t.Error("a NUL byte reached argv")
	}
}

func TestInterpreter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ src, want string }{
		{"#!/usr/bin/env python3\nprint(1)", "/usr/bin/python3 -c"},
		{"#!/bin/bash -e\necho", "/bin/bash -c"},
		{"#!/usr/bin/perl\n", "/usr/bin/perl -e"},
	} {
		got, err := interpreter(nil, []byte(tt.src))
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("%q: %v %v", tt.src, got, err)
		}
	}
	for _, src := range []string{"print(1)", "#!/opt/weird\n"} {
		if _, err := interpreter(nil, []byte(src)); err == nil {
			t.Errorf("%q accepted", src)
		}
	}
}

func TestDecodeScript(t *testing.T) {
	t.Parallel()
	proc := func(stdout string, code int) tools.Result {
		return tools.FromProcess(tools.ProcessInfo{ExitCode: code, Stdout: stdout, Stderr: "noise"}, nil, 0)
	}
	tests := []struct {
		name    string
		in      tools.Result
		ok      bool
		content string
		errSub  string
		arts    int
	}{
		{"plain", proc("42 words\n", 0), true, "42 words\n", "", 0},
		{"answer", proc(`{"ok": true, "content": "fine"}`, 0), true, "fine", "", 0},
		{"answer object content", proc(`{"content": {"a": 1}}`, 0), true, `{"a": 1}`, "", 0},
		{"answer error", proc(`{"error": "no such city"}`, 0), false, "", "no such city", 0},
		{"exit code", proc("partial", 3), false, "partial\n\n[stderr]\nnoise", "code 3", 0},
		{"exit code with answer", proc(`{"error": "bad input"}`, 2), false, "", "bad input (process exited with code 2)", 0},
		{"artifacts", proc(`{"content": "see file", "artifacts": [{"name": "r.csv", "text": "a,b"}, {"data": "iVBORw0KGgo="}]}`, 0), true, "see file", "", 2},
		{"json not an answer", proc(`{"x": 1}`, 0), true, `{"x": 1}`, "", 0},
	}
	for _, tt := range tests {
		r := decodeScript(tt.in)
		if r.OK != tt.ok || r.Content != tt.content || !strings.Contains(r.Error, tt.errSub) || len(r.Artifacts) != tt.arts {
			t.Errorf("%s: ok %v content %q error %q artifacts %d", tt.name, r.OK, r.Content, r.Error, len(r.Artifacts))
		}
	}
	r := decodeScript(proc(`{"artifacts":[{"data":"iVBORw0KGgo="}]}`, 0))
	if len(r.Artifacts) != 1 || r.Artifacts[0].MimeType != "image/png" || r.Artifacts[0].Name != "artifact-1" {
		t.Errorf("artifact %+v", r.Artifacts)
	}
}

// FuzzDecodeScript: whatever a sandboxed script prints, decoding never
// panics, keeps a failed process failed, and gives valid UTF-8 names.
func FuzzDecodeScript(f *testing.F) {
	f.Add(`{"ok":true,"content":"x","artifacts":[{"name":"a","data":"AAAA"}]}`, 0)
	f.Add(`{"error":"e","traceback":"t"}`, 1)
	f.Add(`not json`, 0)
	f.Fuzz(func(t *testing.T, stdout string, code int) {
		in := tools.FromProcess(tools.ProcessInfo{ExitCode: code, Stdout: stdout}, nil, 0)
		for _, dec := range []func(tools.Result) tools.Result{decodeScript, decodePython} {
			r := dec(in)
			if !in.OK && r.OK {
				t.Fatalf("a failed process became ok: %+v", r)
			}
			for _, a := range r.Artifacts {
				if a.Size != int64(len(a.Data)) || a.Name == "" || a.MimeType == "" {
					t.Fatalf("artifact %+v", a)
				}
			}
		}
	})
}

// FuzzArgvExpand: argument values from a model never change the number
// of argv elements beyond dropping ones whose argument is absent.
func FuzzArgvExpand(f *testing.F) {
	f.Add("a b", 1.5, true)
	f.Add("$(id); `x`", 3.0, false)
	tmpl, err := parseArgv([]string{"/bin/echo", "{s}", "-n={n}", "{b}", "lit"}, map[string]bool{"s": true, "n": true, "b": true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, n float64, b bool) {
		argv, err := tmpl.expand(map[string]any{"s": s, "n": n, "b": b})
		if err != nil {
			if !strings.Contains(s, "\x00") {
				t.Fatal(err)
			}
			return
		}
		if len(argv) != 5 || argv[1] != s || argv[4] != "lit" {
			t.Fatalf("argv %q", argv)
		}
	})
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func needPython(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
}

const wordCountYAML = `name: word_count
description: Count the words of a text.
input_schema:
  type: object
  properties:
    text: {type: string}
  required: [text]
argv: [/usr/bin/wc, -w]
`

func TestDirectory(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"upper.yaml": `name: upper
description: Upper-case a text.
input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
argv: [/usr/bin/printf, "%s", "{text}"]
`,
		"stats.yaml": `name: stats
description: Statistics of numbers.
input_schema: {type: object, properties: {numbers: {type: array, items: {type: number}}}, required: [numbers]}
script: stats.py
idempotent: true
`,
		"stats.py":     "#!/usr/bin/env python3\nimport json, sys\nargs = json.load(sys.stdin)\nn = args['numbers']\nprint(json.dumps({'ok': True, 'content': f'mean {sum(n)/len(n)}'}))\n",
		"greet.py":     "def greet(name: str, excited: bool = False) -> str:\n    \"\"\"Greet someone.\n\n    Args:\n        name: Who to greet.\n    \"\"\"\n    print('log line')\n    return f'hello {name}' + ('!' if excited else '')\n",
		"nodoc.py":     "def nodoc(x: int) -> int:\n    return x\n",
		"broken.yaml":  "name: broken\ndescription: x\nargv: [/bin/true, '{missing}']\n",
		"bash.yaml":    "name: bash\ndescription: my bash\nargv: [/bin/true]\n",
		"junk.yaml":    "{{{",
		".hidden.yaml": "nope",
	})
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{Name: "bash", Description: "built-in", Effects: []tools.Effect{tools.EffectExec},
		Command: func(map[string]any) (tools.Command, error) { return tools.Command{Args: []string{"/bin/true"}}, nil }}); err != nil {
		t.Fatal(err)
	}
	sb := &hostSandbox{}
	d := NewDirectory(Options{Dir: dir, Registry: reg, Sandbox: sb})
	st, err := d.Reload(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.Tools)
	if !slices.Equal(st.Tools, []string{"greet", "stats", "upper"}) {
		t.Errorf("tools %v", st.Tools)
	}
	refused := map[string]string{}
	for _, p := range st.Problems {
		refused[filepath.Base(p.Path)] = p.Error
	}
	for file, want := range map[string]string{
		"nodoc.py":    "has no docstring",
		"broken.yaml": "{missing} is not a property",
		"bash.yaml":   "would replace the built-in",
		"junk.yaml":   "YAML",
	} {
		if !strings.Contains(refused[file], want) {
			t.Errorf("%s: problem %q, want %q", file, refused[file], want)
		}
	}
	if len(refused) != 4 {
		t.Errorf("problems %v", refused)
	}
	if b, _ := reg.Lookup("bash"); b.Description != "built-in" {
		t.Error("the built-in bash was replaced")
	}

	// Calls: argv never through a shell, the script's JSON answer, the
	// function's return value (its prints stay out of the content).
	run := func(name string, args map[string]any) tools.Result {
		t.Helper()
		call, tool, parsed, err := reg.Prepare(tools.Call{Name: name, Arguments: mustJSON(args)})
		if err != nil {
			t.Fatalf("Prepare %s: %v", name, err)
		}
		_ = call
		cmd, err := tool.Command(parsed)
		if err != nil {
			t.Fatal(err)
		}
		r, err := runHost(t.Context(), cmd, tool.Effects)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run("upper", map[string]any{"text": "$(echo pwned) ;x"}); r.Content != "$(echo pwned) ;x" {
		t.Errorf("upper: %+v", r)
	}
	if r := run("stats", map[string]any{"numbers": []any{1, 2, 6}}); !r.OK || r.Content != "mean 3.0" {
		t.Errorf("stats: %+v", r)
	}
	greet, _ := reg.Lookup("greet")
	if greet.Description != "Greet someone." || !strings.Contains(string(greet.InputSchema), `"required":["name"]`) ||
		!strings.Contains(string(greet.InputSchema), `"description":"Who to greet."`) || !greet.HasEffect(tools.EffectExec) {
		t.Errorf("greet: %q %s %v", greet.Description, greet.InputSchema, greet.Effects)
	}
	if r := run("greet", map[string]any{"name": "Ada", "excited": true}); !r.OK || r.Content != "hello Ada!" {
		t.Errorf("greet: %+v", r)
	}

	// Reload: a removed file's tool goes, a replaced built-in comes back,
	// a fixed file loads.
	os.Remove(filepath.Join(dir, "upper.yaml"))
	writeFiles(t, dir, map[string]string{"nodoc.py": "def nodoc(x: int) -> int:\n    \"\"\"Now documented.\"\"\"\n    return x\n"})
	st, _ = d.Reload(t.Context())
	if _, ok := reg.Lookup("upper"); ok {
		t.Error("upper survived its file's removal")
	}
	if _, ok := reg.Lookup("nodoc"); !ok {
		t.Errorf("nodoc did not load: %+v", st.Problems)
	}
}

func TestDirectoryReplaceBuiltin(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"bash.yaml": "name: bash\ndescription: my bash\nargv: [/bin/true]\n", "wc.yaml": wordCountYAML})
	reg := tools.NewRegistry()
	builtin := &tools.Tool{Name: "bash", Description: "built-in", Effects: []tools.Effect{tools.EffectExec},
		Command: func(map[string]any) (tools.Command, error) { return tools.Command{Args: []string{"/bin/true"}}, nil }}
	if err := reg.Register(builtin); err != nil {
		t.Fatal(err)
	}
	d := NewDirectory(Options{Dir: dir, Registry: reg, Replace: []string{"bash"}})
	if st, _ := d.Reload(t.Context()); len(st.Problems) != 0 {
		t.Fatalf("problems %v", st.Problems)
	}
	if b, _ := reg.Lookup("bash"); b.Description != "my bash" {
		t.Errorf("bash not replaced: %q", b.Description)
	}
	os.Remove(filepath.Join(dir, "bash.yaml"))
	d.Reload(t.Context())
	if b, _ := reg.Lookup("bash"); b.Description != "built-in" {
		t.Errorf("the built-in did not come back: %q", b.Description)
	}
	if names := reg.Names(); !slices.Equal(names, []string{"bash", "word_count"}) {
		t.Errorf("names %v", names)
	}
}

func TestPythonDerivation(t *testing.T) {
	needPython(t)
	src := `from typing import Optional, Literal
response_format = "content_and_artifact"
effects = ["exec", "file_read"]
timeout = 5
def plot(title: str, points: list[float], kind: Literal["line", "bar"] = "line", note: Optional[str] = None):
    """Plot points."""
    return f"plotted {title}", b"\x89PNG\r\n\x1a\n fake"
`
	sb := &hostSandbox{}
	tool, err := parsePython(t.Context(), sb, "/usr/bin/python3", "/srv/tools/plot.py", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	json.Unmarshal(tool.InputSchema, &schema)
	props := schema["properties"].(map[string]any)
	if props["kind"].(map[string]any)["enum"] == nil || props["points"].(map[string]any)["type"] != "array" ||
		!slices.Equal(tool.Effects, []tools.Effect{tools.EffectExec, tools.EffectFileRead}) || tool.Limits.Timeout != 5*time.Second {
		t.Errorf("tool %+v schema %s", tool, tool.InputSchema)
	}
	cmd, _ := tool.Command(map[string]any{"title": "t", "points": []any{1.0}})
	r, err := runHost(t.Context(), cmd, tool.Effects)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Content != "plotted t" || len(r.Artifacts) != 1 || r.Artifacts[0].MimeType != "image/png" {
		t.Errorf("result %+v", r)
	}
	// An exception: the traceback of the tool's own frames, the error line.
	tool, err = parsePython(t.Context(), sb, "/usr/bin/python3", "/srv/tools/div.py", []byte("def div(a: int, b: int) -> float:\n    \"\"\"Divide.\"\"\"\n    return a / b\n"))
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ = tool.Command(map[string]any{"a": 1.0, "b": 0.0})
	r, _ = runHost(t.Context(), cmd, tool.Effects)
	if r.OK || r.Error != "ZeroDivisionError: division by zero" || !strings.Contains(r.Content, `File "/tools/div.py", line 3, in div`) {
		t.Errorf("exception %+v", r)
	}
	for src, want := range map[string]string{
		"def a(x: int):\n  \"d\"\ndef b(y: int):\n  \"d\"\n": "defines 2: a, b",
		"def f(*args: int):\n  \"d\"\n":                      "*args",
		"def f(x: set[int], y: 'weird'):\n  \"d\"\n":         "unsupported type hint weird",
		"def f(x: int = len('a')):\n  \"d\"\n":               "must be a literal",
		"def f(x: int:\n":                                    "syntax error",
		"import os\n":                                        "defines 0",
	} {
		if _, err := parsePython(t.Context(), sb, "/usr/bin/python3", "/x.py", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
