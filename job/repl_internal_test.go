package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
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

func TestRunREPL(t *testing.T) {
	t.Parallel()
	s := &Service{}
	tool := &tools.Tool{Name: "python_repl", Effects: []tools.Effect{tools.EffectExec}}
	for _, tc := range []struct {
		name    string
		res     replResult
		ok      bool
		content string
		errSub  string
		arts    int
	}{
		{"value appended", replResult{OK: true, Stdout: "hi", Value: "42"}, true, "hi\n42", "", 0},
		{"traceback", replResult{OK: false, Stderr: "Traceback...\nZeroDivisionError", Error: "ZeroDivisionError: division by zero"}, false, "", "ZeroDivisionError", 0},
		{"image", replResult{OK: true, Artifacts: []tools.Artifact{{Name: "fig1.png", MimeType: "image/png", Data: []byte("\x89PNG")}}}, true, "", "", 1},
		{"timeout", replResult{OK: false, TimedOut: true}, false, "", "timed out", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := &Job{ID: "job_x", Limits: runner.Limits{Timeout: time.Second}}
			e := s.newEntry(j, tool, map[string]any{"code": "x = 1"})
			r := &fakeREPL{res: tc.res}
			a := s.runREPL(t.Context(), e, j, r, time.Second)
			if a.err != nil || !a.ran || a.res.OK != tc.ok || !strings.Contains(a.res.Content, tc.content) ||
				(tc.errSub != "" && !strings.Contains(a.res.Error, tc.errSub)) || len(a.res.Artifacts) != tc.arts {
				t.Fatalf("attempt = %+v", a)
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
