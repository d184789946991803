package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

func TestPythonCommand(t *testing.T) {
	t.Parallel()
	tl := toolByName(t, "python_repl")
	cmd, err := tl.Command(map[string]any{"code": "1+1", "timeout_seconds": 2.5})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/python3", "-I", "-S", "-B", "-u", "-c"}; !slices.Equal(cmd.Args[:6], want) || len(cmd.Args) != 7 {
		t.Errorf("args %q", cmd.Args)
	}
	if string(cmd.Stdin) != "1+1" || cmd.Dir != "/workspace" || cmd.Timeout != 2500*time.Millisecond {
		t.Errorf("command %+v", cmd)
	}
	for _, kv := range []string{"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"} {
		if !slices.Contains(cmd.Env, kv) {
			t.Errorf("env lacks %s: %q", kv, cmd.Env)
		}
	}
	// No timeout_seconds: none here, the job's timeout applies.
	cmd, _ = tl.Command(map[string]any{"code": "x"})
	if cmd.Timeout != 0 {
		t.Errorf("timeout without timeout_seconds %v, want 0", cmd.Timeout)
	}
	// Above the ceiling is not clipped here: the job service refuses it.
	cmd, _ = Tools(Options{MaxExecTimeout: 10 * time.Second})[0].Command(map[string]any{"code": "x", "timeout_seconds": 3600.0})
	if cmd.Timeout != time.Hour {
		t.Errorf("timeout_seconds 3600: %v, want 1h", cmd.Timeout)
	}
	// The schema tells the model the default and the ceiling.
	var schema struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(Tools(Options{DefaultExecTimeout: 3 * time.Second, MaxExecTimeout: 10 * time.Second})[0].InputSchema, &schema)
	if d := schema.Properties["timeout_seconds"].Description; !strings.Contains(d, "Default 3 ") || !strings.Contains(d, "at most 10 ") {
		t.Errorf("timeout_seconds description %q", d)
	}
}

func TestBashCommand(t *testing.T) {
	t.Parallel()
	tl := toolByName(t, "bash")
	cmd, err := tl.Command(map[string]any{"command": "echo hi", "timeout_seconds": 5.0})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/bash", "--noprofile", "--norc", "-c", "echo hi"}; !slices.Equal(cmd.Args, want) {
		t.Errorf("args %q", cmd.Args)
	}
	if cmd.Dir != "/workspace" || cmd.Timeout != 5*time.Second || len(cmd.Stdin) != 0 {
		t.Errorf("command %+v", cmd)
	}
	if _, err := tl.Command(map[string]any{"command": strings.Repeat("x", maxArgBytes+1)}); err == nil {
		t.Error("oversized command accepted")
	}
}

// TestPythonWrapper runs the wrapper with the host's python3, the way the
// sandbox will.
func TestPythonWrapper(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	tests := []struct {
		name, code     string
		stdout, stderr string // substrings; stdout "" means empty
		exit           int
		err            string // the result's error (decodePython)
	}{
		{"last expression printed", "x = 2\nx * 21", "42\n", "", 0, ""},
		{"repr of strings", "'a' + 'b'", "'ab'\n", "", 0, ""},
		{"None not printed", "print('p')\nNone", "p\n", "", 0, ""},
		{"statement last", "y = 3", "", "", 0, ""},
		{"multi-line last expr", "def f(a):\n    return a + 1\nf(\n  1\n)", "2\n", "", 0, ""},
		{"exception", "1/0", "", "ZeroDivisionError", 1, "the code raised ZeroDivisionError: division by zero"},
		{"traceback shows cell line", "def f():\n    raise ValueError('boom')\nf()", "", "raise ValueError('boom')", 1, "the code raised ValueError: boom"},
		{"syntax error", "def (:", "", "SyntaxError", 1, "the code raised SyntaxError: invalid syntax"},
		{"sys.exit keeps status", "import sys\nsys.exit(3)", "", "", 3, "process exited with code 3"},
		{"sys.exit with a message", "import sys\nsys.exit('bad input')", "", "bad input", 1, "process exited with code 1"},
		{"exit builtin as with site", "print(1)\nexit(4)", "1\n", "", 4, "process exited with code 4"},
		{"multi-line exception message", "raise ValueError('a\\nb')", "", "ValueError: a\nb", 1, "the code raised ValueError: a"},
		{"missing module", "import no_such_module_xyz", "", "ModuleNotFoundError", 1, "the code raised ModuleNotFoundError: No module named 'no_such_module_xyz'"},
		{"site directories after a non-stdlib import", "import site, sys\ntry:\n    import no_such_module_xyz\nexcept ImportError:\n    pass\nall(d in sys.path for d in site.getsitepackages() if __import__('os').path.isdir(d))", "True\n", "", 0, ""},
		{"no site directories before", "import site, sys\nany(d in sys.path for d in site.getsitepackages())", "False\n", "", 0, ""},
		{"stdin is empty", "import sys\nsys.stdin.read()", "''\n", "", 0, ""},
		{"unicode", "'héllo ✓'", "'héllo ✓'\n", "", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := exec.CommandContext(t.Context(), py, "-I", "-S", "-B", "-u", "-c", pythonWrapper)
			c.Stdin = strings.NewReader(tc.code)
			c.Env = sandboxEnv()
			c.Dir = t.TempDir()
			var out, errb bytes.Buffer
			c.Stdout, c.Stderr = &out, &errb
			err := c.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exit {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.exit, errb.String())
			}
			if tc.stdout == "" && out.Len() != 0 || !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr %q, want it to contain %q", errb.String(), tc.stderr)
			}
			res := decodePython(tools.FromProcess(tools.ProcessInfo{ExitCode: code, Stdout: out.String(), Stderr: errb.String()}, nil, time.Second))
			if res.Error != tc.err || res.OK != (tc.exit == 0) {
				t.Errorf("result ok=%v error %q, want %q", res.OK, res.Error, tc.err)
			}
			if strings.Contains(errb.String(), "_run()") {
				t.Errorf("traceback shows the wrapper: %s", errb.String())
			}
		})
	}
}
