//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/local"
	"github.com/sandboxd/sandboxd/runner/runnertest"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// BenchmarkSpawnInterleaved runs the local-runner comparison with the
// contenders interleaved call by call, so that this machine's drift (its
// speed changes by tens of percent from minute to minute) hits all of them
// alike. Each iteration runs, in turn:
//
//	bare:        /usr/bin/python3 -c 'print(1)' spawned directly
//	runner:      the same through the local runner (sandbox created once)
//	runner-repl: python_repl's command for print(1), Create + Exec + Close
//	api:         python_repl {"code":"print(1)"} through the HTTP API
//
// and reports the median and 99th percentile of each.
func BenchmarkSpawnInterleaved(b *testing.B) {
	ctx := context.Background()
	r, err := local.New(local.Config{StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: b.TempDir(), Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(ctx)
	var cmdArgs, cmdEnv []string
	var cmdDir string
	var cmdStdin []byte
	for _, t := range builtin.Tools(builtin.Options{}) {
		if t.Name == "python_repl" {
			c, err := t.Command(map[string]any{"code": "print(1)"})
			if err != nil {
				b.Fatal(err)
			}
			cmdArgs, cmdEnv, cmdDir, cmdStdin = c.Args, c.Env, c.Dir, c.Stdin
		}
	}
	ws := b.TempDir()
	s := startServer(b, "")
	client := &http.Client{}

	contenders := []struct {
		name string
		fn   func() error
	}{
		{"bare", func() error {
			out, err := exec.Command(pyArgs[0], pyArgs[1:]...).Output()
			if err == nil && string(out) != "1\n" {
				err = fmt.Errorf("output %q", out)
			}
			return err
		}},
		{"runner", func() error { return runPy(ctx, sb) }},
		{"runner-repl", func() error {
			sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
			if err != nil {
				return err
			}
			defer sb.Close(ctx)
			res, err := sb.Exec(ctx, runner.Process{Args: cmdArgs, Env: cmdEnv, Dir: cmdDir, Stdin: bytes.NewReader(cmdStdin)})
			if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "1\n") {
				err = fmt.Errorf("result %+v", res)
			}
			return err
		}},
		{"api", func() error { return apiCall(client, s.URL, "python_repl", map[string]any{"code": "print(1)"}) }},
	}
	times := make([][]time.Duration, len(contenders))
	for _, c := range contenders { // warm up, and fail fast
		if err := c.fn(); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, c := range contenders {
			t0 := time.Now()
			if err := c.fn(); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			times[k] = append(times[k], time.Since(t0))
		}
	}
	b.StopTimer()
	for k, c := range contenders {
		d := times[k]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, c.name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, c.name+"-p99-ms")
	}
}
