package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

type fakeREPL struct {
	runner.Sandbox
	res replResult
	got replRequest
}

func (f *fakeREPL) REPL(ctx context.Context, req replRequest, onOutput func(string, []byte)) (replResult, error) {
	f.got = req
	onOutput("stdout", []byte(f.res.Stdout))
	return f.res, nil
}

// TestRunREPL: a session cell's result has the one-shot's shape (see
// tools/builtin/python_result.go): the value printed on stdout, the
// traceback on stderr with status 1, sys.exit's status, the same error
// lines, process details kept.
func TestRunREPL(t *testing.T) {
	t.Parallel()
	s := &Service{}
	py := pythonTool(t)
	cmd, err := py.Command(map[string]any{"code": "x"})
	if err != nil {
		t.Fatal(err)
	}
	const tb = "Traceback (most recent call last):\n  File \"<cell-2>\", line 1, in <module>\nZeroDivisionError: division by zero\n"
	for _, tc := range []struct {
		name    string
		res     replResult
		ok      bool
		content string
		err     string
		exit    int
		arts    int
	}{
		{"value printed", replResult{OK: true, Stdout: "hi\n", Value: "42"}, true, "hi\n42\n", "", 0, 0},
		{"value after unterminated output", replResult{OK: true, Stdout: "a", Value: "1"}, true, "a1\n", "", 0, 0},
		{"traceback", replResult{OK: false, Stderr: "warn\n", Error: tb, ExitCode: 1}, false,
			"[stderr]\nwarn\n" + tb, "the code raised ZeroDivisionError: division by zero", 1, 0},
		{"sys.exit", replResult{OK: false, ExitCode: 3}, false, "", "process exited with code 3", 3, 0},
		{"image", replResult{OK: true, Artifacts: []tools.Artifact{{Name: "fig1.png", MimeType: "image/png", Data: []byte("\x89PNG")}}}, true, "", "", 0, 1},
		{"timeout", replResult{OK: false, TimedOut: true, Error: "KeyboardInterrupt", ExitCode: 1}, false, "", "timed out after", 0, 0},
		{"interpreter gone", replResult{OK: false, Error: "python interpreter exited (signal: killed) during the cell"}, false, "",
			"python interpreter exited (signal: killed) during the cell", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := &Job{ID: "job_x", Limits: runner.Limits{Timeout: time.Second}}
			e := s.newEntry(j, py, map[string]any{"code": "x = 1"})
			r := &fakeREPL{res: tc.res}
			a := s.runREPL(t.Context(), e, j, r, time.Second, cmd.Decode)
			if a.err != nil || !a.ran || a.res.OK != tc.ok || a.res.Content != tc.content || len(a.res.Artifacts) != tc.arts ||
				!strings.HasPrefix(a.res.Error, tc.err) || (tc.err == "") != (a.res.Error == "") {
				t.Fatalf("attempt = %+v", a)
			}
			if a.res.Process == nil || a.res.Process.ExitCode != tc.exit || a.res.Process.TimedOut != tc.res.TimedOut {
				t.Fatalf("process = %+v", a.res.Process)
			}
			if r.got.Code != "x = 1" || r.got.Timeout != time.Second {
				t.Fatalf("request = %+v", r.got)
			}
			if tc.arts > 0 && (a.res.Artifacts[0].MimeType != "image/png" || a.res.Artifacts[0].Size != 4) {
				t.Fatalf("artifact = %+v", a.res.Artifacts[0])
			}
			if a.timedOut != tc.res.TimedOut {
				t.Fatalf("timedOut = %v", a.timedOut)
			}
		})
	}
}

func pythonTool(t *testing.T) *tools.Tool {
	t.Helper()
	for _, tl := range builtin.Tools(builtin.Options{}) {
		if tl.Name == "python_repl" {
			return tl
		}
	}
	t.Fatal("no python_repl")
	return nil
}
