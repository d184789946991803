package fake

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

func TestConformance(t *testing.T) {
	r := New()
	runnertest.Run(t, runnertest.Factory{New: func(*testing.T) runner.Runner { return r }, Leftovers: r.Leftovers})
	if r.Created() == 0 || r.Created() != r.Closed() {
		t.Fatalf("created %d closed %d", r.Created(), r.Closed())
	}
}

func TestHooks(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := New()
	r.CreateErr = boom
	if _, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)}); !errors.Is(err, boom) {
		t.Fatalf("CreateErr: %v", err)
	}
	r.CreateErr = nil
	r.ExecFunc = func(ctx context.Context, sb *Sandbox, p runner.Process) (runner.Result, error) {
		return runner.Result{ExitCode: 7, Stdout: []byte(p.Args[0])}, nil
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"hello"}})
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "hello" {
		t.Fatalf("%+v %v", res, err)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := r.Leftovers(sb.ID()); len(left) > 0 {
		t.Fatal(left)
	}
	if r.Created() != 1 || r.Closed() != 1 || r.Execs() != 1 {
		t.Fatalf("counters %d %d %d", r.Created(), r.Closed(), r.Execs())
	}
}
