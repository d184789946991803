package containerd

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// BenchmarkContainerd compares, in one run, starting Python through the
// ctr CLI (a fresh container with run --rm, and task exec into a running
// one) with this runner: one-shot (Create, Exec, Close per call) and
// pooled (Exec in an already created sandbox, through the agent). Each
// reports p50 and p99 latency in milliseconds.
func BenchmarkContainerd(b *testing.B) {
	needContainerd(b)
	py := []string{"/usr/bin/python3", "-c", "print(1)"}
	img := normalizeRef(DefaultImage)
	ctr := func(args ...string) *exec.Cmd {
		return exec.Command("ctr", append([]string{"-a", address, "-n", DefaultNamespace}, args...)...)
	}
	b.Run("ctr-run", func(b *testing.B) {
		measure(b, func() error {
			args := append([]string{"run", "--rm", "--read-only", img, "bench-" + hostside.NewID()}, py...)
			return ctr(args...).Run()
		})
	})
	b.Run("ctr-task-exec", func(b *testing.B) {
		name := "bench-" + hostside.NewID()
		if out, err := ctr("run", "-d", "--read-only", img, name, "sleep", "600").CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		defer func() {
			ctr("task", "kill", "-s", "SIGKILL", name).Run()
			time.Sleep(200 * time.Millisecond)
			ctr("task", "delete", "-f", name).Run()
			ctr("container", "delete", name).Run()
		}()
		measure(b, func() error {
			args := append([]string{"task", "exec", "--exec-id", "e" + hostside.NewID(), name}, py...)
			return ctr(args...).Run()
		})
	})
	r := newTestRunner(b, Config{ReconcileInterval: -1})
	b.Run("runner-create-exec-close", func(b *testing.B) {
		measure(b, func() error {
			ctx := context.Background()
			sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
			if err != nil {
				return err
			}
			_, err = sb.Exec(ctx, runner.Process{Args: py})
			if cerr := sb.Close(ctx); err == nil {
				err = cerr
			}
			return err
		})
	})
	b.Run("runner-exec-pooled", func(b *testing.B) {
		sb, err := r.Create(context.Background(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close(context.Background())
		measure(b, func() error {
			res, err := sb.Exec(context.Background(), runner.Process{Args: py})
			if err == nil && strings.TrimSpace(string(res.Stdout)) != "1" {
				b.Fatalf("stdout %q", res.Stdout)
			}
			return err
		})
	})
	b.Run("runner-exec-pooled-true", func(b *testing.B) {
		sb, err := r.Create(context.Background(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close(context.Background())
		measure(b, func() error {
			_, err := sb.Exec(context.Background(), runner.Process{Args: []string{"/bin/true"}})
			return err
		})
	})
	if fi, err := os.Stat(DefaultRunscBinary); err == nil && fi.Mode()&0o111 != 0 {
		g := newTestRunner(b, Config{Runtime: RuntimeRunsc, ReconcileInterval: -1})
		b.Run("runsc-create-exec-close", func(b *testing.B) {
			measure(b, func() error {
				ctx := context.Background()
				sb, err := g.Create(ctx, runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
				if err != nil {
					return err
				}
				_, err = sb.Exec(ctx, runner.Process{Args: py})
				if cerr := sb.Close(ctx); err == nil {
					err = cerr
				}
				return err
			})
		})
		b.Run("runsc-exec-pooled", func(b *testing.B) {
			sb, err := g.Create(context.Background(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close(context.Background())
			measure(b, func() error {
				_, err := sb.Exec(context.Background(), runner.Process{Args: py})
				return err
			})
		})
	}
	b.Run("host-python", func(b *testing.B) {
		measure(b, func() error { return exec.Command(py[0], py[1:]...).Run() })
	})
	b.Run("host-true", func(b *testing.B) {
		measure(b, func() error { return exec.Command("/bin/true").Run() })
	})
}

// measure runs op b.N times and reports latency percentiles.
func measure(b *testing.B, op func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
