package docker

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// BenchmarkDocker compares, in one run, starting Python through the docker
// CLI (run and exec) with this runner (a fresh sandbox per call, and an
// Exec in an already created sandbox through the agent). Each reports
// p50 and p99 latency in milliseconds.
func BenchmarkDocker(b *testing.B) {
	needDocker(b)
	py := []string{"/usr/bin/python3", "-c", "print(1)"}
	b.Run("cli-run", func(b *testing.B) {
		args := append([]string{"run", "--rm", "--network", "none", testImage}, py...)
		measure(b, func() error { return exec.Command("docker", args...).Run() })
	})
	b.Run("cli-exec", func(b *testing.B) {
		name := "sandboxd-bench-" + hostside.NewID()
		if out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", "--name", name, "--entrypoint", "sleep", testImage, "600").CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		defer exec.Command("docker", "rm", "-f", name).Run()
		args := append([]string{"exec", name}, py...)
		measure(b, func() error { return exec.Command("docker", args...).Run() })
	})
	r := newTestRunner(b, Config{})
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
	b.Run("runner-exec", func(b *testing.B) {
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
	reportLatency(b, lat)
}

// reportLatency reports the p50 and p99 of lat in milliseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
