package job_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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

// syncRunner's sandboxes keep their agent's workspace apart from the
// host's (runner.WorkspaceSyncer, as the Kubernetes runner's pods do):
// Push marks the agent's root, Pull records what the cell left there.
type syncRunner struct {
	*fake.Runner
	mu   sync.Mutex
	made []*syncSandbox
}

type syncSandbox struct {
	*agentSandbox
	root         string
	pushes       int
	pullsSawCell []bool
}

func (s *syncSandbox) PushWorkspace(context.Context) error {
	s.pushes++
	return os.WriteFile(s.root+"/pushed", []byte(strconv.Itoa(s.pushes)), 0o644)
}

func (s *syncSandbox) PullWorkspace(context.Context) error {
	_, err := os.Stat(s.root + "/cell")
	s.pullsSawCell = append(s.pullsSawCell, err == nil)
	return nil
}

func (r *syncRunner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	sb, err := r.Runner.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "agent-root-")
	if err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	actx, cancel := context.WithCancel(context.Background())
	go agent.ServeConn(actx, b, agent.ServerOptions{Root: root, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}})
	ss := &syncSandbox{agentSandbox: &agentSandbox{Sandbox: sb, c: agent.NewClient(a), cancel: func() { cancel(); os.RemoveAll(root) }}, root: root}
	r.mu.Lock()
	r.made = append(r.made, ss)
	r.mu.Unlock()
	return ss, nil
}

// TestSessionREPLSyncsWorkspace: a session's python_repl cell in a
// sandbox whose workspace is a copy is preceded by a push (the cell sees
// it) and followed by a pull (which sees what the cell wrote), once each.
func TestSessionREPLSyncsWorkspace(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	r := &syncRunner{Runner: fake.New()}
	h := newSessHarness(t, r, job.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		j := h.run(t, "acme", s.ID, "python_repl", `{"code":"print(open('pushed').read()); _ = open('cell', 'w').write('x')"}`)
		if j.State != job.StateSucceeded || j.Result.Content != strconv.Itoa(i)+"\n" {
			t.Fatalf("cell %d: %+v (want it to see push %d)", i, j.Result, i)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var sb *syncSandbox
	for _, x := range r.made {
		if x.pushes > 0 {
			sb = x
		}
	}
	if sb == nil || sb.pushes != 2 || len(sb.pullsSawCell) != 2 || !sb.pullsSawCell[0] {
		t.Fatalf("sandboxes %d, the session's %+v: want 2 pushes and 2 pulls, after the cell", len(r.made), sb)
	}
}
