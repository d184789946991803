package docker

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// BenchmarkRuntime compares runc (the daemon default) with gVisor (runsc),
// side by side in one run:
//
//   - exec-true: an Exec of /bin/true in an already created sandbox (the
//     warm session call: agent round trip plus a fork/exec inside);
//   - repl: a REPL cell "1+1" in an already running interpreter (agent
//     round trip only, no process creation);
//   - create-exec-close: a fresh sandbox per call running /bin/true.
//
// Each reports p50 and p99 latency in milliseconds. runsc is skipped when
// dockerd does not have it (scripts/gvisor-setup.sh).
//
//	go test -run '^$' -bench BenchmarkRuntime -benchtime 200x ./runner/docker/
func BenchmarkRuntime(b *testing.B) {
	needDocker(b)
	for _, rt := range []string{"runc", runscRuntime} {
		b.Run(rt, func(b *testing.B) {
			var r *Runner
			if rt == runscRuntime {
				r = newRunscRunner(b, Config{})
			} else {
				r = newTestRunner(b, Config{})
			}
			benchRuntime(b, r)
		})
	}
}

func benchRuntime(b *testing.B, r *Runner) {
	ctx := context.Background()
	sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(ctx)
	trueCmd := runner.Process{Args: []string{"/bin/true"}}
	b.Run("exec-true", func(b *testing.B) {
		measure(b, func() error {
			res, err := sb.Exec(ctx, trueCmd)
			if err == nil && res.ExitCode != 0 {
				b.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			return err
		})
	})
	// What a caller pacing its calls sees (an LLM between tool calls):
	// under gVisor the stray sweep after the previous Exec has finished.
	b.Run("exec-true-paced", func(b *testing.B) {
		s := sb.(*Sandbox)
		measureEach(b, func() { s.waitIdle() }, func() error {
			_, err := sb.Exec(ctx, trueCmd)
			return err
		})
	})
	// The sweep itself (gVisor runs it after every Exec).
	b.Run("sweep-script", func(b *testing.B) {
		cl := sb.(*Sandbox).Agent()
		req := agent.ExecRequest{Args: []string{"/bin/sh", "-c", sweepScript}, Dir: "/", Timeout: sweepTimeout}
		measure(b, func() error {
			res, err := cl.Exec(ctx, req, nil)
			if err == nil && res.ExitCode != 0 {
				b.Fatalf("sweep: %+v", res)
			}
			return err
		})
	})
	b.Run("repl", func(b *testing.B) {
		cl := sb.(*Sandbox).Agent()
		cell := agent.REPLRequest{Code: "1+1"}
		if _, err := cl.REPL(ctx, cell, nil); err != nil { // starts the interpreter
			b.Fatal(err)
		}
		measure(b, func() error {
			res, err := cl.REPL(ctx, cell, nil)
			if err == nil && res.Value != "2" {
				b.Fatalf("1+1 = %+v", res)
			}
			return err
		})
	})
	// The API benchmark's call: print(1) streams its output.
	b.Run("repl-print", func(b *testing.B) {
		cl := sb.(*Sandbox).Agent()
		cell := agent.REPLRequest{Code: "print(1)"}
		measure(b, func() error {
			res, err := cl.REPL(ctx, cell, func(string, []byte) {})
			if err == nil && res.Stdout != "1\n" {
				b.Fatalf("print(1) = %+v", res)
			}
			return err
		})
	})
	b.Run("create-exec-close", func(b *testing.B) {
		measure(b, func() error {
			sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
			if err != nil {
				return err
			}
			_, err = sb.Exec(ctx, trueCmd)
			if cerr := sb.Close(ctx); err == nil {
				err = cerr
			}
			return err
		})
	})
}

// measureEach is measure with an untimed prepare step before each op.
func measureEach(b *testing.B, prepare func(), op func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		prepare()
		b.StartTimer()
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// waitIdle waits until no revive or sweep runs (benchmarks).
func (s *Sandbox) waitIdle() {
	for {
		s.mu.Lock()
		busy := s.reviving != nil || s.sweeping != nil
		s.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}
