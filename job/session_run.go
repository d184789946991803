package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// enterSession waits for the job's turn in its session. ok is false when
// the job cannot run there; a is then its outcome: the session is closed
// (failed/tool_error: the model can start another session), the wait for
// the session's earlier jobs outlasted the job's timeout (failed/timeout),
// or the job was cancelled meanwhile.
func (s *Service) enterSession(ctx context.Context, j *Job) (*liveSession, attempt, bool) {
	ls := s.liveSession(j.SessionID)
	closed := attempt{res: tools.Result{OK: false,
		Error: fmt.Sprintf("session %s is closed; create a new session", j.SessionID)}}
	if ls == nil {
		return nil, closed, false
	}
	err := ls.waitTurn(ctx, j.ID, j.Limits.Timeout)
	switch {
	case err == nil:
		s.touch(ls)
		return ls, attempt{}, true
	case errors.Is(err, ErrSessionClosed):
		return nil, closed, false
	case errors.Is(err, errTurnTimeout):
		return nil, attempt{timedOut: true, res: tools.Result{OK: false,
			Error: fmt.Sprintf("timed out after %s waiting for the earlier jobs of session %s", j.Limits.Timeout, j.SessionID)}}, false
	default: // cancelled: classify reads the cancel reason
		return nil, attempt{res: tools.Result{OK: false}}, false
	}
}

// replSandbox is a sandbox with a persistent Python REPL (globals survive
// between calls). A sandbox whose runner implements it (every runner's,
// through the agent) runs a session's python_repl calls there; others (the
// fake) run the stateless command, so state persists only through files.
type replSandbox interface {
	REPL(ctx context.Context, req replRequest, onOutput func(stream string, chunk []byte)) (replResult, error)
}

type replRequest struct {
	Code        string
	Timeout     time.Duration
	OutputLimit int64
}

// replResult mirrors the agent's REPL result.
type replResult struct {
	OK                  bool
	Stdout, Stderr      string
	Value, Error        string
	ExitCode            int // the cell's status as a process's (agent.REPLResult.ExitCode)
	Artifacts           []tools.Artifact
	TimedOut, Restarted bool
	Duration            time.Duration
}

// replOf finds the REPL of a sandbox (see agent_repl.go for the agent
// adapter).
func replOf(sb runner.Sandbox) (replSandbox, bool) {
	if r, ok := sb.(replSandbox); ok {
		return r, true
	}
	return agentREPL(sb)
}

// runREPL runs a python_repl call in the session's REPL and gives it the
// result a one-shot call of the same cell gets (the contract is in
// tools/builtin/python_result.go): the trailing expression's value is
// printed to stdout, the traceback of an uncaught exception is the cell's
// stderr and its status 1, sys.exit(n) is status n, and the result comes
// from the same tools.FromProcess and the tool's decode as a one-shot's.
// Only images the code produced (artifacts) and a restarted interpreter's
// note are the session's own.
func (s *Service) runREPL(ctx context.Context, e *entry, j *Job, repl replSandbox, timeout time.Duration, decode func(tools.Result) tools.Result) attempt {
	code, _ := e.args["code"].(string)
	stdout := newEventWriter(e.events, EventStdout)
	stderr := newEventWriter(e.events, EventStderr)
	ectx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, timeout+execGrace)
		defer cancel()
	}
	start := time.Now()
	rr, err := repl.REPL(ectx, replRequest{Code: code, Timeout: timeout, OutputLimit: j.Limits.OutputBytes},
		func(stream string, chunk []byte) {
			if stream == "stderr" {
				_, _ = stderr.Write(chunk)
			} else {
				_, _ = stdout.Write(chunk)
			}
		})
	wall := time.Since(start)
	if err != nil {
		return attempt{ran: true, err: fmt.Errorf("repl in sandbox: %w", err)}
	}
	info := tools.ProcessInfo{Stdout: rr.Stdout, Stderr: rr.Stderr, TimedOut: rr.TimedOut, MemoryLimit: j.Limits.MemoryBytes}
	if rr.Value != "" && !rr.TimedOut {
		v := rr.Value + "\n" // as the one-shot interpreter prints it
		info.Stdout += v
		_, _ = stdout.Write([]byte(v))
	}
	if !rr.TimedOut && rr.ExitCode != 0 {
		info.ExitCode = rr.ExitCode
		if rr.Error != "" { // the traceback: the one-shot interpreter's last words on stderr
			info.Stderr += rr.Error
			_, _ = stderr.Write([]byte(rr.Error))
		}
	}
	res := tools.FromProcess(info, e.tool.Effects, wall)
	if decode != nil && !rr.TimedOut {
		res = decode(res)
	}
	if !rr.OK && res.OK { // the interpreter is gone (rr.Error says why), or a cell failed without a status
		res.OK = false
		res.Error = rr.Error
		if res.Error == "" {
			res.Error = "the cell failed"
		}
	}
	if rr.Restarted {
		res.Content += "\n[the REPL was restarted: earlier variables are gone]"
	}
	for _, a := range rr.Artifacts {
		if a.Size == 0 {
			a.Size = int64(len(a.Data))
		}
		res.Artifacts = append(res.Artifacts, a)
	}
	return attempt{res: res, ran: true, timedOut: rr.TimedOut}
}
