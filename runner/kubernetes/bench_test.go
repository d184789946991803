package kubernetes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/containerd"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// BenchmarkVsContainerd runs, interleaved in one run on one machine, the
// kubernetes runner and the containerd runner (its daemon at
// CONTAINERD_ADDRESS, default containerd.DefaultAddress):
//   - one-shot: Create, Exec of python3 -c 'print(1)', Close;
//   - warm: an Exec in a sandbox created before (a session's call; the
//     pool's one-shot is this Exec plus a Close off the request path).
//
// Each round runs every case once per runner in alternating order;
// p50/p99 in ms are reported per runner and case. Goals (issue 15):
// warm within 1 ms of containerd at the median, one-shot within 2x.
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
	warm := make([]runner.Sandbox, len(runners))
	for i, r := range runners {
		sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: iso})
		if err != nil {
			b.Fatalf("%s: %v", r.Name(), err)
		}
		defer sb.Close(ctx)
		warm[i] = sb
	}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for n := range b.N {
		for j := range runners {
			i := (j + n) % len(runners) // alternate who goes first
			r := runners[i]
			t0 := time.Now()
			if _, err := warm[i].Exec(ctx, py); err != nil {
				b.Fatal(err)
			}
			lat[r.Name()+"/warm"] = append(lat[r.Name()+"/warm"], time.Since(t0))
			t0 = time.Now()
			sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: iso})
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
