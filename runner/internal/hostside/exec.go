package hostside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/iox"
)

// MaxStdin caps a process's stdin (it travels in one agent frame).
const MaxStdin = 4 << 20

// ExecRequest checks p and turns it into the agent's request for a sandbox
// with limits and a workspace in mode. onOutput, non-nil when p streams
// output, forwards the agent's chunks to p.Stdout and p.Stderr.
func ExecRequest(p runner.Process, limits runner.Limits, mode runner.WorkspaceMode) (agent.ExecRequest, func(string, []byte), error) {
	if len(p.Args) == 0 || p.Args[0] == "" {
		return agent.ExecRequest{}, nil, fmt.Errorf("exec: empty Args: %w", runner.ErrInvalidSpec)
	}
	if p.Timeout < 0 {
		return agent.ExecRequest{}, nil, fmt.Errorf("exec: negative timeout %v: %w", p.Timeout, runner.ErrInvalidSpec)
	}
	req := agent.ExecRequest{
		Args:        p.Args,
		Env:         p.Env,
		Dir:         p.Dir,
		Timeout:     p.Timeout,
		OutputLimit: limits.OutputBytes,
	}
	if p.LongLived { // no wall-clock limit; stdin streamed as it arrives
		req.LongLived, req.Timeout, req.StdinStream = true, 0, p.Stdin
	} else if req.Timeout == 0 {
		req.Timeout = limits.Timeout
	}
	if req.Env == nil {
		req.Env = []string{}
	}
	if req.Dir == "" {
		req.Dir = "/"
		if mode != runner.WorkspaceNone {
			req.Dir = runner.WorkspaceDir
		}
	}
	if p.Stdin != nil && !p.LongLived {
		b, err := io.ReadAll(io.LimitReader(p.Stdin, MaxStdin+1))
		if err != nil {
			return agent.ExecRequest{}, nil, fmt.Errorf("exec: read stdin: %w", err)
		}
		if len(b) > MaxStdin {
			return agent.ExecRequest{}, nil, fmt.Errorf("exec: stdin larger than %d bytes: %w", MaxStdin, runner.ErrInvalidSpec)
		}
		req.Stdin = b
	}
	if p.Stdout == nil && p.Stderr == nil {
		return req, nil, nil
	}
	// The agent streams only what it keeps: ask it to keep its maximum so
	// live writers see the whole output (up to agent.MaxOutputLimit);
	// ExecResult caps the result.
	req.OutputLimit = max(req.OutputLimit, agent.MaxOutputLimit)
	return req, func(stream string, chunk []byte) {
		switch {
		case stream == "stdout" && p.Stdout != nil:
			p.Stdout.Write(chunk)
		case stream == "stderr" && p.Stderr != nil:
			p.Stderr.Write(chunk)
		}
	}, nil
}

// ExecResult turns the agent's result of req into the runner's: output
// capped at limits, the exit code of a signal, and, with a readable cgroup
// watched by w (nil: none), OOM kills, a fork loop and usage from its
// samples before and after the Exec.
func ExecResult(ar agent.ExecResult, req agent.ExecRequest, limits runner.Limits, w *ExecWatch) runner.Result {
	res := runner.Result{
		ExitCode:        ar.ExitCode,
		Signal:          signalName(ar.Signal),
		TimedOut:        ar.TimedOut,
		Stdout:          ar.Stdout,
		Stderr:          ar.Stderr,
		StdoutTruncated: ar.StdoutTruncated,
		StderrTruncated: ar.StderrTruncated,
		Duration:        ar.Duration,
		KilledAt:        ar.KilledAt,
	}
	if req.OutputLimit > limits.OutputBytes { // raised for live output
		res.Stdout, res.StdoutTruncated = recap(res.Stdout, res.StdoutTruncated, limits.OutputBytes)
		res.Stderr, res.StderrTruncated = recap(res.Stderr, res.StderrTruncated, limits.OutputBytes)
	}
	if res.Stdout == nil {
		res.Stdout = []byte{}
	}
	if res.Stderr == nil {
		res.Stderr = []byte{}
	}
	if sig := int(unix.SignalNum(res.Signal)); sig != 0 && res.ExitCode <= 0 {
		res.ExitCode = 128 + sig
	}
	// Without a host cgroup: the agent's view from inside
	// (agent.ServerOptions.CgroupUsage), if it has one.
	res.OOMKilled = ar.OOMKilled
	res.Usage = runner.Usage{CPU: ar.CPU, PeakMemory: ar.PeakMemory}
	if w != nil && w.cg != nil {
		res.OOMKilled = res.Signal == "SIGKILL" && !res.TimedOut && w.After.OOMKills > w.Before.OOMKills
		res.ForkLoop = ar.Killed && w.ForkLoop()
		res.Usage = runner.Usage{CPU: w.After.CPU - w.Before.CPU, PeakMemory: w.After.Peak}
	}
	return res
}

// OOMResult is the result of a process whose sandbox's agent the OOM
// killer took.
func OOMResult(peak int64) runner.Result {
	return runner.Result{ExitCode: 128 + int(syscall.SIGKILL), Signal: "SIGKILL", OOMKilled: true,
		Stdout: []byte{}, Stderr: []byte{}, Usage: runner.Usage{PeakMemory: peak}}
}

// recap caps output at limit bytes, keeping head and tail.
func recap(b []byte, truncated bool, limit int64) ([]byte, bool) {
	if int64(len(b)) <= limit {
		return b, truncated
	}
	c := iox.NewCapture(limit)
	c.Write(b)
	out, _ := c.Bytes()
	return out, true
}

// signalName turns the agent's signal description ("killed", "SIGKILL",
// "9") into the runner's form ("SIGKILL").
func signalName(s string) string {
	if s == "" {
		return ""
	}
	if n := unix.SignalNum(s); n != 0 {
		return s
	}
	for i := syscall.Signal(1); i < 65; i++ {
		if i.String() == s || fmt.Sprint(int(i)) == s {
			if name := unix.SignalName(i); name != "" {
				return name
			}
		}
	}
	return s
}

// CanExec is the start of a container sandbox's Exec: a closed sandbox
// answers runner.ErrClosed, a cancelled ctx its error.
func CanExec(ctx context.Context, id string, closed bool) error {
	if closed {
		return fmt.Errorf("exec in sandbox %s: %w", id, runner.ErrClosed)
	}
	return ctx.Err()
}

// ExecError classifies an error of the agent's Exec in sandbox id: the
// caller's ctx ended, the sandbox was closed meanwhile (runner.ErrClosed),
// or the agent refused the request (bad dir, ...: the caller's input,
// runner.ErrInvalidSpec). ok is false for anything else: the runner looks
// at its sandbox's state (an OOM kill, a dead agent).
func ExecError(ctx context.Context, id string, closed func() bool, err error) (_ error, ok bool) {
	switch {
	case ctx.Err() != nil:
		return ctx.Err(), true
	case closed():
		return fmt.Errorf("exec in sandbox %s: %w", id, runner.ErrClosed), true
	}
	var re *agent.RemoteError
	if errors.As(err, &re) {
		return fmt.Errorf("exec in sandbox %s: %w: %w", id, runner.ErrInvalidSpec, err), true
	}
	return nil, false
}

// Prestart starts p in a container sandbox ahead of its Exec
// (runner.Prestarter): the agent holds it, waiting on its stdin, for the
// first Exec of the same process. p is checked and converted as Exec
// converts it; its Stdin must be nil (the Exec brings it) and it must not
// be long-lived.
func Prestart(ctx context.Context, id string, closed bool, cl *agent.Client, p runner.Process, limits runner.Limits, mode runner.WorkspaceMode) error {
	if err := CanExec(ctx, id, closed); err != nil {
		return err
	}
	if p.Stdin != nil || p.LongLived {
		return fmt.Errorf("prestart: a prestarted process gets its stdin from its Exec and is not long-lived: %w", runner.ErrInvalidSpec)
	}
	req, _, err := ExecRequest(p, limits, mode)
	if err != nil {
		return err
	}
	if cl == nil {
		return fmt.Errorf("prestart in sandbox %s: %w", id, runner.ErrUnavailable)
	}
	if err := cl.Prestart(ctx, &req); err != nil {
		return fmt.Errorf("prestart in sandbox %s: %w", id, err)
	}
	return nil
}
