//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/local"
	"github.com/sandboxd/sandboxd/runner/runnertest"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// The spawn benchmarks run side by side in one `go test -bench` run:
//
//	bare:          /usr/bin/python3 -c 'print(1)' spawned directly
//	runner:        the same argv through the local runner (sandbox created once)
//	runner-fresh:  the same with Create + Exec + Close per call (what a job does)
//	runner-repl:   python_repl's own command for print(1) (its notebook
//	               wrapper, code on stdin), Create + Exec + Close per call
//	api-python:    python_repl {"code": "print(1)"} through the HTTP API
//	               (?wait=true): runner-repl plus the job service and HTTP
//	               (the local runner's default: no warm pool)
//	api-python-pooled: the same with a warm pool of 2
//
// Each reports p50-ms and p99-ms besides Go's mean ns/op.

var pyArgs = []string{"/usr/bin/python3", "-c", "print(1)"}

func BenchmarkSpawn(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		measure(b, func() error {
			out, err := exec.Command(pyArgs[0], pyArgs[1:]...).Output()
			if err == nil && string(out) != "1\n" {
				err = fmt.Errorf("output %q", out)
			}
			return err
		})
	})

	r, err := local.New(local.Config{StateDir: b.TempDir(), AgentPath: agentPath, LauncherPath: launcherPath})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("runner", func(b *testing.B) {
		sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: b.TempDir(), Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close(ctx)
		measure(b, func() error { return runPy(ctx, sb) })
	})
	b.Run("runner-fresh", func(b *testing.B) {
		ws := b.TempDir()
		measure(b, func() error {
			sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
			if err != nil {
				return err
			}
			defer sb.Close(ctx)
			return runPy(ctx, sb)
		})
	})

	var repl *tools.Tool
	for _, t := range builtin.Tools(builtin.Options{}) {
		if t.Name == "python_repl" {
			repl = t
		}
	}
	cmd, err := repl.Command(map[string]any{"code": "print(1)"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("runner-repl", func(b *testing.B) {
		ws := b.TempDir()
		measure(b, func() error {
			sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
			if err != nil {
				return err
			}
			defer sb.Close(ctx)
			res, err := sb.Exec(ctx, runner.Process{Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Stdin: bytes.NewReader(cmd.Stdin)})
			if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "1\n") {
				err = fmt.Errorf("result %+v", res)
			}
			return err
		})
	})

	s := startServer(b, "")
	client := &http.Client{}
	b.Run("api-python", func(b *testing.B) {
		measure(b, func() error {
			return apiCall(client, s.URL, "python_repl", map[string]any{"code": "print(1)"})
		})
	})
	s0 := startServer(b, "pool:\n  size: 2\n")
	b.Run("api-python-pooled", func(b *testing.B) {
		measure(b, func() error {
			return apiCall(client, s0.URL, "python_repl", map[string]any{"code": "print(1)"})
		})
	})
}

func runPy(ctx context.Context, sb runner.Sandbox) error {
	res, err := sb.Exec(ctx, runner.Process{Args: pyArgs})
	if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "1\n") {
		err = fmt.Errorf("result %+v", res)
	}
	return err
}

// BenchmarkAPICalculator200 sends calculator calls through the HTTP API from
// 200 concurrent clients and reports calls per second.
func BenchmarkAPICalculator200(b *testing.B) {
	s := startServer(b, "")
	tr := &http.Transport{MaxIdleConns: 400, MaxIdleConnsPerHost: 400}
	client := &http.Client{Transport: tr}
	const workers = 200
	// Warm the connections.
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); apiCall(client, s.URL, "calculator", map[string]any{"expression": "1+1"}) }()
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	var next int64
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= int64(b.N) || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				if err := apiCall(client, s.URL, "calculator", map[string]any{"expression": "2**64 // 3 + sqrt(2)"}); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

// measure runs fn b.N times and reports the median and 99th percentile.
func measure(b *testing.B, fn func() error) { measurePaced(b, nil, fn) }

// measurePaced is measure with an untimed step before each call (nil: none).
func measurePaced(b *testing.B, before func() error, fn func() error) {
	b.Helper()
	if err := fn(); err != nil { // warm up, and fail fast
		b.Fatal(err)
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if before != nil {
			b.StopTimer()
			if err := before(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}

func apiCall(c *http.Client, base, tool string, args map[string]any) error {
	return keyedCallCtx(context.Background(), c, base, "", tool, args)
}
