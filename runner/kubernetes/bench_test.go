package kubernetes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/containerd"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// BenchmarkVsContainerd runs, interleaved in one run on one machine, the
// kubernetes runner and the containerd runner (its daemon at
// CONTAINERD_ADDRESS, default containerd.DefaultAddress):
//   - session: a REPL cell print(1) in a sandbox with a read-write
//     workspace created before, as the job service runs a session's
//     python_repl call (on Kubernetes with the workspace's push before and
//     pull after, runner.WorkspaceSyncer);
//   - pooled: an Exec of python3 -c 'print(1)' prestarted in a sandbox
//     created before (runner.Prestarter), as the pool serves a one-shot
//     (its Create and Close off the request path, not timed);
//   - one-shot: Create, Exec, Close, without a pool.
//
// Each round runs every case once per runner in alternating order;
// p50/p99 in ms are reported per runner and case. Goals (issue 15):
// session within 1 ms of containerd at the median, pooled within 2x.
func BenchmarkVsContainerd(b *testing.B) {
	k := newCluster(b)
	agentPath := filepath.Join(b.TempDir(), "sandbox-agent")
	build := exec.Command("go", "build", "-o", agentPath, "github.com/sandboxd/sandboxd/cmd/sandbox-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build agent: %v\n%s", err, out)
	}
	addr := os.Getenv("CONTAINERD_ADDRESS")
	dir, _ := os.MkdirTemp("", "sbd-kb-")
	defer os.RemoveAll(dir)
	c, err := containerd.New(context.Background(), containerd.Config{Address: addr, AgentPath: agentPath, StateDir: dir, ReconcileInterval: -1})
	if err != nil {
		b.Skipf("containerd runner: %v", err)
	}
	defer c.Close(context.Background())
	runners := []runner.Runner{k, c}
	iso := runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	py := runner.Process{Args: []string{"/usr/bin/python3", "-c", "print(1)"}}
	ctx := context.Background()
	session := make([]runner.Sandbox, len(runners))
	for i, r := range runners {
		ws := filepath.Join(dir, "ws-"+r.Name())
		if err := os.MkdirAll(ws, 0o777); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(ws, "data.txt"), []byte("a session's file"), 0o644)
		sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
		if err != nil {
			b.Fatalf("%s: %v", r.Name(), err)
		}
		defer sb.Close(ctx)
		session[i] = sb
		if _, err := sb.(runner.AgentSandbox).Agent().REPL(ctx, agent.REPLRequest{Code: "x = 1", Timeout: time.Minute}, nil); err != nil {
			b.Fatal(err)
		}
	}
	cell := func(sb runner.Sandbox) error {
		ws, _ := sb.(runner.WorkspaceSyncer)
		if ws != nil {
			if err := ws.PushWorkspace(ctx); err != nil {
				return err
			}
		}
		r, err := sb.(runner.AgentSandbox).Agent().REPL(ctx, agent.REPLRequest{Code: "print(1)", Timeout: time.Minute, OutputLimit: 1 << 20}, nil)
		if err == nil && !r.OK {
			err = fmt.Errorf("cell failed: %+v", r)
		}
		if err == nil && ws != nil {
			err = ws.PullWorkspace(ctx)
		}
		return err
	}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for n := range b.N {
		for j := range runners {
			i := (j + n) % len(runners) // alternate who goes first
			r := runners[i]
			t0 := time.Now()
			if err := cell(session[i]); err != nil {
				b.Fatal(err)
			}
			lat[r.Name()+"/session"] = append(lat[r.Name()+"/session"], time.Since(t0))

			b.StopTimer()
			sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: iso})
			if err == nil {
				err = sb.(runner.Prestarter).Prestart(ctx, py)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t0 = time.Now()
			if _, err := sb.Exec(ctx, py); err != nil {
				b.Fatal(err)
			}
			lat[r.Name()+"/pooled"] = append(lat[r.Name()+"/pooled"], time.Since(t0))
			b.StopTimer()
			sb.Close(ctx)
			b.StartTimer()

			t0 = time.Now()
			sb, err = r.Create(ctx, runner.SandboxSpec{Isolation: iso})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(ctx, py); err != nil {
				b.Fatal(err)
			}
			err = sb.Close(ctx)
			lat[r.Name()+"/one-shot"] = append(lat[r.Name()+"/one-shot"], time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for name, ds := range lat {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
}
