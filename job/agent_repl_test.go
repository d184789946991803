package job_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
)

// agentRunner wraps the fake runner: each sandbox also runs a real agent
// (in this process, rooted at the workspace), like a container backend.
type agentRunner struct{ *fake.Runner }

type agentSandbox struct {
	runner.Sandbox
	c      *agent.Client
	cancel context.CancelFunc
}

var _ runner.AgentSandbox = (*agentSandbox)(nil)

func (s *agentSandbox) Agent() *agent.Client { return s.c }

func (s *agentSandbox) Close(ctx context.Context) error {
	s.c.Close()
	s.cancel()
	return s.Sandbox.Close(ctx)
}

func (r agentRunner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	sb, err := r.Runner.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	actx, cancel := context.WithCancel(context.Background())
	go agent.ServeConn(actx, b, agent.ServerOptions{Root: spec.Workspace, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}})
	return &agentSandbox{Sandbox: sb, c: agent.NewClient(a), cancel: cancel}, nil
}

// TestSessionREPLThroughAgent: in a session whose sandbox has an agent,
// python_repl keeps its globals between calls, shows the last expression's
// value as a one-shot prints it and reports an exception as a one-shot
// does (traceback on stderr, status 1, the exception in error).
func TestSessionREPLThroughAgent(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	h := newSessHarness(t, agentRunner{fake.New()}, job.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if j := h.run(t, "acme", s.ID, "python_repl", `{"code":"x = 41\nprint('set')"}`); j.State != job.StateSucceeded || j.Result.Content != "set\n" {
		t.Fatalf("first cell: %+v", j.Result)
	}
	if j := h.run(t, "acme", s.ID, "python_repl", `{"code":"x + 1"}`); j.State != job.StateSucceeded || j.Result.Content != "42\n" {
		t.Fatalf("second cell: %+v", j.Result)
	}
	j := h.run(t, "acme", s.ID, "python_repl", `{"code":"1/0"}`)
	if j.State != job.StateFailed || j.Reason != job.ReasonToolError || j.Result.OK ||
		j.Result.Error == "" || !strings.Contains(j.Result.Content, "[stderr]\nTraceback") ||
		j.Result.Process == nil || j.Result.Process.ExitCode != 1 {
		t.Fatalf("exception: %+v %+v", j, j.Result)
	}
	// A one-shot python_repl (no session) still runs the command.
	if j := h.run(t, "acme", "", "python_repl", `{"code":"echo oneshot"}`); j.Result.Content != "oneshot\n" {
		t.Fatalf("one-shot: %+v", j.Result)
	}
}
