package job

import (
	"context"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// agentREPL adapts a sandbox with the in-sandbox agent
// (runner.AgentSandbox: every backend but the fake) to replSandbox; a
// sandbox without one runs a session's python_repl as the stateless
// command. A sandbox whose workspace is a copy of the host's
// (runner.WorkspaceSyncer) gets the host's changes before each cell and
// gives its own back after it, as its Exec does.
func agentREPL(sb runner.Sandbox) (replSandbox, bool) {
	as, ok := sb.(runner.AgentSandbox)
	if !ok || as.Agent() == nil {
		return nil, false
	}
	ws, _ := sb.(runner.WorkspaceSyncer)
	return agentClientREPL{as.Agent(), ws}, true
}

type agentClientREPL struct {
	c  *agent.Client
	ws runner.WorkspaceSyncer // nil: the workspace is the host's
}

func (a agentClientREPL) REPL(ctx context.Context, req replRequest, onOutput func(string, []byte)) (replResult, error) {
	if a.ws != nil {
		if err := a.ws.PushWorkspace(ctx); err != nil {
			return replResult{}, err
		}
	}
	r, err := a.c.REPL(ctx, agent.REPLRequest{Code: req.Code, Timeout: req.Timeout, OutputLimit: req.OutputLimit}, onOutput)
	if err != nil {
		return replResult{}, err
	}
	if a.ws != nil {
		if err := a.ws.PullWorkspace(ctx); err != nil {
			return replResult{}, err
		}
	}
	out := replResult{
		OK: r.OK, Stdout: r.Stdout, Stderr: r.Stderr, Value: r.Value, Error: r.Error, ExitCode: r.ExitCode,
		TimedOut: r.TimedOut, Restarted: r.Restarted, Duration: r.Duration,
	}
	for _, art := range r.Artifacts {
		out.Artifacts = append(out.Artifacts, tools.Artifact{Name: art.Name, MimeType: art.MimeType, Size: int64(len(art.Data)), Data: art.Data})
	}
	return out, nil
}
