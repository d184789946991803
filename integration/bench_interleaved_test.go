//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
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
//	bare:           /usr/bin/python3 -c 'print(1)' spawned directly
//	bwrap:          the same under bubblewrap with comparable isolation:
//	                every namespace, uid 65534, no capabilities, a read-only
//	                /usr and /etc, fresh /proc, /dev and /tmp, the policy's
//	                seccomp filter (compiled as the local runner does); no
//	                cgroup limits
//	runner-exec:    the same argv through the agent of a local sandbox
//	                created once
//	runner-oneshot: python_repl {"code":"print(1)"}'s command through the
//	                local runner: Create + Exec, as a one-shot job does (its
//	                Close, untimed, follows)
//	api-oneshot:    python_repl {"code":"print(1)"} through the HTTP API
//	                (?wait=true), the default config: a warm pool of 2,
//	                refilled between calls (waited for, untimed, as an
//	                agent loop leaves it the time)
//	api-nopool:     the same with pool.size 0: Create on the call's path
//	api-session:    the same call in a warm session (the agent's REPL)
//
// and reports the median and 99th percentile of each. bwrap is skipped
// when it is not installed.
func BenchmarkSpawnInterleaved(b *testing.B) {
	ctx := context.Background()
	r, err := local.New(local.Config{StateDir: b.TempDir(), AgentPath: agentPath, LauncherPath: launcherPath})
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
	client := &http.Client{}
	s := startServer(b, "")
	nopool := startServer(b, "pool:\n  size: 0\n")
	session, err := createSession(ctx, s.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer deleteSession(s.URL, session)
	bwrap := bwrapCommand(b)

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
		{"bwrap", bwrap},
		{"runner-exec", func() error { return runPy(ctx, sb) }},
		{"runner-oneshot", func() error {
			sb, err := r.Create(ctx, runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
			if err != nil {
				return err
			}
			res, err := sb.Exec(ctx, runner.Process{Args: cmdArgs, Env: cmdEnv, Dir: cmdDir, Stdin: bytes.NewReader(cmdStdin)})
			if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "1\n") {
				err = fmt.Errorf("result %+v", res)
			}
			// Untimed, as in a job (its result does not wait for it).
			defer func(t0 time.Time) { sb.Close(ctx); untimed += time.Since(t0) }(time.Now())
			return err
		}},
		{"api-oneshot", func() error { return apiCall(client, s.URL, "python_repl", map[string]any{"code": "print(1)"}) }},
		{"api-nopool", func() error {
			return apiCall(client, nopool.URL, "python_repl", map[string]any{"code": "print(1)"})
		}},
		{"api-session", func() error { return sessionCall(ctx, client, s.URL, session, "print(1)") }},
	}
	times := make([][]time.Duration, len(contenders))
	for _, c := range contenders { // warm up, and fail fast
		if c.fn == nil {
			continue
		}
		if err := c.fn(); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, c := range contenders {
			if c.fn == nil {
				continue
			}
			switch c.name {
			case "api-oneshot":
				if err := waitPoolReady(s.MetricsURL, 2); err != nil {
					b.Fatal(err)
				}
			case "api-session":
				// The steady state, as BenchmarkRuntimes measures it: the
				// pool refilled after the one-shot and the sandboxes the
				// one-shots used gone (their Close and the refill run in
				// the background and would otherwise share the 2 cores
				// with the session call).
				if err := waitPoolReady(s.MetricsURL, 2); err != nil {
					b.Fatal(err)
				}
				if err := waitMetric(s.MetricsURL, "sandboxd_sandboxes_alive ", func(v float64) bool { return v == 3 }); err != nil {
					b.Fatal(err)
				}
				if err := waitMetric(nopool.MetricsURL, "sandboxd_sandboxes_alive ", func(v float64) bool { return v == 0 }); err != nil {
					b.Fatal(err)
				}
			}
			untimed = 0
			t0 := time.Now()
			if err := c.fn(); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			times[k] = append(times[k], time.Since(t0)-untimed)
		}
	}
	b.StopTimer()
	for k, c := range contenders {
		d := times[k]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, c.name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, c.name+"-p99-ms")
	}
}

// untimed is what a contender's own deferred cleanup took (subtracted).
var untimed time.Duration

// bwrapCommand returns the bubblewrap contender, nil without bwrap. Its
// seccomp filter is the policy's profile for a sandbox without http, in
// the kernel's sock_filter layout (bwrap --seccomp reads it from an fd).
func bwrapCommand(b *testing.B) func() error {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		b.Logf("no bwrap: %v", err)
		return nil
	}
	arch, err := seccompbpf.LookupArch(runtime.GOARCH)
	if err != nil {
		b.Fatal(err)
	}
	prog, err := seccompbpf.Assemble(runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone).Seccomp, arch)
	if err != nil {
		b.Fatal(err)
	}
	var filter []byte
	for _, in := range prog {
		filter = binary.NativeEndian.AppendUint16(filter, in.Op)
		filter = append(filter, in.Jt, in.Jf)
		filter = binary.NativeEndian.AppendUint32(filter, in.K)
	}
	filterPath := filepath.Join(b.TempDir(), "seccomp.bpf")
	if err := os.WriteFile(filterPath, filter, 0o600); err != nil {
		b.Fatal(err)
	}
	args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if target, err := os.Readlink(d); err == nil {
			args = append(args, "--symlink", target, d)
		} else if _, err := os.Stat(d); err == nil {
			args = append(args, "--ro-bind", d, d)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/", "--clearenv", "--seccomp", "3")
	args = append(args, pyArgs...)
	return func() error {
		f, err := os.Open(filterPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := exec.Command(path, args...)
		cmd.ExtraFiles = []*os.File{f}
		out, err := cmd.CombinedOutput()
		if err == nil && string(out) != "1\n" {
			err = fmt.Errorf("output %q", out)
		}
		if err != nil {
			return fmt.Errorf("bwrap: %w: %s", err, out)
		}
		return nil
	}
}
