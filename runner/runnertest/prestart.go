package runnertest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// prestartCases are python_repl calls whose result must not depend on
// whether the interpreter was started ahead of the call.
var prestartCases = []struct{ name, code string }{
	{"print", "print(1)"},
	{"value", "x = 6 * 7\nx"},
	{"stderr", "import sys\nprint('out')\nprint('err', file=sys.stderr)"},
	{"traceback", "def f():\n    raise ValueError('boom')\nf()"},
	{"syntax error", "def (:"},
	{"exit code", "import sys\nsys.exit(3)"},
	{"cwd, stdin, env, uid", "import os, sys\n(os.getcwd(), sys.stdin.read(), sorted(os.environ), os.getuid(), sys.path[0])"},
	{"workspace", "open('note.txt', 'w').write('x')\nimport os\nsorted(os.listdir('.'))"},
	{"signal", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"},
	{"output cap", "print('y' * 300000)"},
	{"timeout", "import time\ntime.sleep(30)"},
}

// testPrestart: a python_repl call whose interpreter the sandbox started
// ahead of it (runner.Prestarter, what the job service's pool does) gives
// the result of one started at the call, case by case side by side; the
// timeout counts from the call; another command, not the prestarted one,
// runs in a sandbox where the interpreter is gone.
func (s *suite) testPrestart(t *testing.T) {
	iso := Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)
	limits := runner.Limits{OutputBytes: 64 << 10, Timeout: 2 * time.Second}
	held := s.sandbox(t, runner.SandboxSpec{Workspace: workspace(t), Isolation: iso, Limits: limits})
	ps, ok := held.(runner.Prestarter)
	if !ok {
		t.Skipf("runner %s has no Prestarter", s.r.Name())
	}
	fresh := s.sandbox(t, runner.SandboxSpec{Workspace: workspace(t), Isolation: iso, Limits: limits})
	var py *tools.Tool
	for _, tl := range builtin.Tools(builtin.Options{PythonPath: s.f.Python}) {
		if tl.Name == "python_repl" {
			py = tl
		}
	}
	process := func(code string) runner.Process {
		cmd, err := py.Command(map[string]any{"code": code})
		if err != nil {
			t.Fatal(err)
		}
		p := runner.Process{Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Timeout: cmd.Timeout,
			Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		if code != "" {
			p.Stdin = bytes.NewReader(cmd.Stdin)
		}
		return p
	}
	prestart := func() {
		t.Helper()
		p := process("pass")
		p.Stdin = nil
		if err := ps.Prestart(t.Context(), p); err != nil {
			t.Fatalf("Prestart: %v", err)
		}
	}
	for _, tc := range prestartCases {
		prestart()
		time.Sleep(200 * time.Millisecond) // let it start and wait
		start := time.Now()
		got := s.exec(t, held, process(tc.code))
		took := time.Since(start)
		want := s.exec(t, fresh, process(tc.code))
		if d := diffResults(got, want); d != "" {
			t.Errorf("%s: prestarted and fresh results differ: %s", tc.name, d)
		}
		if tc.name == "timeout" && (!got.TimedOut || took < limits.Timeout*9/10) {
			t.Errorf("timeout: prestarted call timed out %v after the call (TimedOut %v), limit %v", took, got.TimedOut, limits.Timeout)
		}
	}

	// The call ran in the interpreter started ahead: it is older than the
	// call by the wait.
	prestart()
	time.Sleep(time.Second)
	age := func(sb runner.Sandbox) float64 {
		t.Helper()
		r := s.exec(t, sb, process("import os\nst = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"+
			"up = float(open('/proc/uptime').read().split()[0])\nprint(up - int(st[19]) / os.sysconf('SC_CLK_TCK'))"))
		mustOK(t, r)
		v, err := strconv.ParseFloat(strings.TrimSpace(string(r.Stdout)), 64)
		if err != nil {
			t.Fatalf("age: %q", r.Stdout)
		}
		return v
	}
	if a := age(held); a < 0.5 {
		t.Errorf("the prestarted interpreter is %.3fs old at the call: the call started its own", a)
	}
	if a := age(held); a >= 0.5 {
		t.Errorf("a second call is %.3fs old: the prestarted interpreter served twice", a)
	}

	// Any other command: the prestarted interpreter is gone before it runs.
	prestart()
	time.Sleep(200 * time.Millisecond)
	r := s.exec(t, held, runner.Process{Args: []string{"/bin/sh", "-c",
		`for d in /proc/[0-9]*; do tr '\0' ' ' <$d/cmdline 2>/dev/null; echo; done`}})
	mustOK(t, r)
	if strings.Contains(string(r.Stdout), "-I -S -B -u -c") {
		t.Errorf("the prestarted interpreter is still running under another command:\n%s", r.Stdout)
	}
}

// diffResults compares what a caller sees of two results (not durations
// or usage).
func diffResults(a, b runner.Result) string {
	var d []string
	if a.ExitCode != b.ExitCode || a.Signal != b.Signal || a.TimedOut != b.TimedOut || a.OOMKilled != b.OOMKilled {
		d = append(d, fmt.Sprintf("exit %d %q timed out %v oom %v, against %d %q %v %v",
			a.ExitCode, a.Signal, a.TimedOut, a.OOMKilled, b.ExitCode, b.Signal, b.TimedOut, b.OOMKilled))
	}
	if !bytes.Equal(a.Stdout, b.Stdout) || a.StdoutTruncated != b.StdoutTruncated {
		d = append(d, fmt.Sprintf("stdout %q (truncated %v), against %q (%v)", clip(a.Stdout), a.StdoutTruncated, clip(b.Stdout), b.StdoutTruncated))
	}
	if !bytes.Equal(a.Stderr, b.Stderr) || a.StderrTruncated != b.StderrTruncated {
		d = append(d, fmt.Sprintf("stderr %q (truncated %v), against %q (%v)", clip(a.Stderr), a.StderrTruncated, clip(b.Stderr), b.StderrTruncated))
	}
	return strings.Join(d, "; ")
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
