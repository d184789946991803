package local

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

const pythonPath = "/usr/bin/python3"

// BenchmarkBarePython is the baseline: python3 -c 'print(1)' spawned directly.
func BenchmarkBarePython(b *testing.B) {
	var d durations
	for b.Loop() {
		t0 := time.Now()
		out, err := exec.Command(pythonPath, "-c", "print(1)").Output()
		d = append(d, time.Since(t0))
		if err != nil || string(out) != "1\n" {
			b.Fatalf("%q %v", out, err)
		}
	}
	d.report(b)
}

// BenchmarkExecPython runs the same command through Exec on a sandbox
// created once.
func BenchmarkExecPython(b *testing.B) {
	r := newTestRunner(b)
	sb, err := r.Create(context.Background(), runner.SandboxSpec{Workspace: b.TempDir(), Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(context.Background())
	var d durations
	for b.Loop() {
		t0 := time.Now()
		res, err := sb.Exec(context.Background(), runner.Process{Args: []string{pythonPath, "-c", "print(1)"}})
		d = append(d, time.Since(t0))
		if err != nil || string(res.Stdout) != "1\n" {
			b.Fatalf("%+v %v", res, err)
		}
	}
	d.report(b)
}

// BenchmarkCreateExecClose is the cold path: a sandbox per command.
func BenchmarkCreateExecClose(b *testing.B) {
	r := newTestRunner(b)
	for b.Loop() {
		sb, err := r.Create(context.Background(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(context.Background(), runner.Process{Args: []string{pythonPath, "-c", "print(1)"}})
		if err != nil || string(res.Stdout) != "1\n" {
			b.Fatalf("%+v %v", res, err)
		}
		if err := sb.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// durations reports the median next to Go's mean (the machine is noisy).
type durations []time.Duration

func (d durations) report(b *testing.B) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
}
