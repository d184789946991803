//go:build integration

package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// resultCell is one call run one-shot and in a session.
type resultCell struct {
	name, tool string
	args       map[string]any
	// ok, exit, errPrefix and content are what both must give ("" content:
	// not checked beyond being equal; errPrefix "": no error; exit -1:
	// timed out, the status is the runner's).
	ok        bool
	exit      int
	errPrefix string
	content   string
}

var resultCells = []resultCell{
	{"value", "python_repl", map[string]any{"code": "6 * 7"}, true, 0, "", "42\n"},
	{"value after unterminated output", "python_repl", map[string]any{"code": "print('a', end='')\n1"}, true, 0, "", "a1\n"},
	{"stdout, stderr and value", "python_repl", map[string]any{"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\n'v'"},
		true, 0, "", "out\n'v'\n\n[stderr]\nerr\n"},
	{"None", "python_repl", map[string]any{"code": "None"}, true, 0, "", ""},
	{"exception", "python_repl", map[string]any{"code": "print('before')\n1/0"}, false, 1,
		"the code raised ZeroDivisionError: division by zero", ""},
	{"exception in a function", "python_repl", map[string]any{"code": "def f():\n    raise ValueError('boom')\nf()"}, false, 1,
		"the code raised ValueError: boom", ""},
	{"syntax error", "python_repl", map[string]any{"code": "def (:"}, false, 1, "the code raised SyntaxError: invalid syntax", ""},
	{"sys.exit(3)", "python_repl", map[string]any{"code": "import sys\nsys.exit(3)"}, false, 3, "process exited with code 3", ""},
	{"sys.exit with a message", "python_repl", map[string]any{"code": "import sys\nsys.exit('bad input')"}, false, 1,
		"process exited with code 1", "[stderr]\nbad input\n"},
	{"exit(0)", "python_repl", map[string]any{"code": "print(1)\nexit(0)"}, true, 0, "", "1\n"},
	{"missing module", "python_repl", map[string]any{"code": "import no_such_module_xyz"}, false, 1,
		"the code raised ModuleNotFoundError: No module named 'no_such_module_xyz'", ""},
	{"numpy from the image", "python_repl", map[string]any{"code": "import numpy as np\nint(np.arange(10).sum())"}, true, 0, "", "45\n"},
	{"timeout", "python_repl", map[string]any{"code": "import time\nprint('start')\ntime.sleep(30)", "timeout_seconds": 2}, false, -1,
		"timed out after", "start\n"},
	{"bash", "bash", map[string]any{"command": "echo out; echo err >&2; exit 3"}, false, 3, "process exited with code 3", "out\n\n[stderr]\nerr\n"},
}

// cellNumber is the only difference a traceback may show: a session
// numbers its cells (<cell-3>), a one-shot's is <cell>.
var cellNumber = regexp.MustCompile(`<cell-\d+>`)

// TestResultShape: the same calls one-shot and in a session give the same
// result (content, ok, error, exit status, stdout, stderr; the contract
// of tools/builtin/python_result.go) on every runner.
func TestResultShape(t *testing.T) {
	for _, rc := range []struct{ name, config string }{
		{"local", ""},
		{"docker", runtimeConfig("docker", "")},
		{"docker-runsc", runtimeConfig("docker", "runsc")},
		{"containerd", runtimeConfig("containerd", "")},
		{"containerd-runsc", runtimeConfig("containerd", "runsc")},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if strings.HasPrefix(rc.name, "docker") {
				needDocker(t)
			}
			s := startServer(t, rc.config)
			var ses struct {
				ID string `json:"id"`
			}
			resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses)
			if resp.StatusCode != 201 || ses.ID == "" {
				t.Fatalf("create session: %d %s", resp.StatusCode, data)
			}
			for _, c := range resultCells {
				one := s.run("", c.tool, c.args)
				var in jobView
				resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": c.tool, "arguments": c.args, "session_id": ses.ID}, &in)
				if resp.StatusCode != 200 || in.Result == nil {
					t.Fatalf("%s in session: %d %s", c.name, resp.StatusCode, data)
				}
				a, b := shape(one), shape(in)
				if a != b {
					t.Errorf("%s: one-shot and session differ:\none-shot: %s\nsession:  %s", c.name, a, b)
					continue
				}
				r := one.Result
				if r.OK != c.ok || r.Process == nil || (c.exit >= 0 && r.Process.ExitCode != c.exit) || !strings.HasPrefix(r.Error, c.errPrefix) ||
					(c.errPrefix == "") != (r.Error == "") || (c.content != "" && r.Content != c.content) {
					t.Errorf("%s: %s", c.name, a)
				}
				if c.tool == "python_repl" && c.exit == 1 && strings.HasPrefix(c.errPrefix, "the code raised") &&
					!strings.Contains(r.Content, "[stderr]\n") {
					t.Errorf("%s: the traceback is not in the content: %q", c.name, r.Content)
				}
			}
		})
	}
}

// shape is what must be equal one-shot and in a session.
func shape(j jobView) string {
	r := j.Result
	p := "no process"
	if r.Process != nil {
		p = fmt.Sprintf("timed_out=%v stdout=%q stderr=%q", r.Process.TimedOut, r.Process.Stdout, cellNumber.ReplaceAllString(r.Process.Stderr, "<cell>"))
		if !r.Process.TimedOut { // a one-shot's is killed, a session's interrupted
			p += fmt.Sprintf(" exit=%d signal=%q", r.Process.ExitCode, r.Process.Signal)
		}
	}
	return fmt.Sprintf("state=%s reason=%s ok=%v content=%q error=%q %s", j.State, j.Reason, r.OK,
		cellNumber.ReplaceAllString(r.Content, "<cell>"), r.Error, p)
}
