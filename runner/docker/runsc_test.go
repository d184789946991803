package docker

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// runscRuntime is the name scripts/gvisor-setup.sh registers gVisor under.
const runscRuntime = "runsc"

// needRunsc skips the test unless dockerd has the runsc runtime; with
// SANDBOXD_REQUIRE_GVISOR set it fails instead.
func needRunsc(tb testing.TB) {
	tb.Helper()
	if reason := runscMissing(); reason != "" {
		if os.Getenv("SANDBOXD_REQUIRE_GVISOR") != "" {
			tb.Fatalf("SANDBOXD_REQUIRE_GVISOR is set but gVisor is not usable: %s (run scripts/gvisor-setup.sh)", reason)
		}
		tb.Skipf("gVisor not usable: %s (run scripts/gvisor-setup.sh; set SANDBOXD_REQUIRE_GVISOR=1 to fail instead of skipping)", reason)
	}
}

func runscMissing() string {
	if skipReason != "" {
		return skipReason
	}
	c, err := client.New(client.FromEnv)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Info(ctx, client.InfoOptions{})
	info := res.Info
	if err != nil {
		return err.Error()
	}
	if _, ok := info.Runtimes[runscRuntime]; !ok {
		return "dockerd has no runtime " + runscRuntime
	}
	return ""
}

func newRunscRunner(tb testing.TB, cfg Config) *Runner {
	tb.Helper()
	needRunsc(tb)
	cfg.Runtime = runscRuntime
	return newTestRunner(tb, cfg)
}

// TestConformanceRunsc runs the conformance suite with gVisor as the
// container runtime.
func TestConformanceRunsc(t *testing.T) {
	r := newRunscRunner(t, Config{})
	leaks := maps.Clone(runnertest.GVisorKnownLeaks)
	leaks["workspace lacks nosuid"] = "Docker gives runsc no options for a bind but ro, so the Sentry's mount of the workspace lacks nosuid " +
		"(on containerd it has it); a set-user-ID program there still runs as the code (no_new_privs: the attack on it is denied), and the host's mount is nosuid"
	runnertest.Run(t, runnertest.Factory{
		New:             func(t *testing.T) runner.Runner { return r },
		Leftovers:       r.leftovers,
		DropsPrivileges: true,
		KillsDaemons:    true,
		KnownLeaks:      leaks,
		KnownGaps:       runnertest.GVisorKnownGaps,
	})
}

func TestIsGVisor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path string
		want       bool
	}{
		{"runsc", "/usr/local/bin/runsc", true},
		{"gvisor", "/opt/bin/runsc", true},
		{"runsc-kvm", "", true},
		{"runc", "runc", false},
		{"runsc", "/usr/bin/crun", false}, // the path decides
		{"io.containerd.runc.v2", "", false},
	} {
		if got := isGVisor(tc.name, tc.path); got != tc.want {
			t.Errorf("isGVisor(%q, %q) = %v, want %v", tc.name, tc.path, got, tc.want)
		}
	}
}

// TestRunscContainerConfig: what the runner changes for gVisor.
func TestRunscContainerConfig(t *testing.T) {
	r := newRunscRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Limits: runner.Limits{PIDs: 50}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	insp, err := r.inspect(t.Context(), sb.(*Sandbox).ContainerID())
	if err != nil {
		t.Fatal(err)
	}
	hc := insp.HostConfig
	if hc.Runtime != runscRuntime {
		t.Errorf("Runtime %q", hc.Runtime)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != gvisorHostPIDs(50) {
		t.Errorf("host pids limit %v, want %d", hc.PidsLimit, gvisorHostPIDs(50))
	}
	var nproc bool
	for _, u := range hc.Ulimits {
		nproc = nproc || u.Name == "nproc" && u.Soft == 49 && u.Hard == 49
	}
	if !nproc { // 50 pids, one the agent's (hostside.GVisorNProc)
		t.Errorf("no nproc ulimit of 49: %v", hc.Ulimits)
	}
	prof, _ := seccompJSON(runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone).SeccompGVisor)
	if !slices.Contains(hc.SecurityOpt, "seccomp="+prof) {
		t.Errorf("the container lacks the isolation's gVisor seccomp profile")
	}
	// Inside: the profile applies (--oci-seccomp), threads start (clone3
	// allowed), processes and posix_spawn work, inet sockets are denied.
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/usr/bin/python3", "-c", `import os, socket, subprocess, threading
print("seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
t = threading.Thread(target=lambda: print("thread ok")); t.start(); t.join()
print(subprocess.run(["/bin/echo", "subprocess ok"], capture_output=True, text=True).stdout.strip())
print("posix_spawn", os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {}), 0)[1])
try:
    socket.socket(socket.AF_INET); print("inet OPENED")
except OSError as e:
    print("inet", e.errno)
print("nproc", __import__("resource").getrlimit(__import__("resource").RLIMIT_NPROC))`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := "seccomp 2\nthread ok\nsubprocess ok\nposix_spawn 0\ninet 1\nnproc (49, 49)\n"
	if string(res.Stdout) != want {
		t.Fatalf("got\n%s\nstderr %s\nwant\n%s", res.Stdout, res.Stderr, want)
	}
}

// TestRunscOOMRestarts: under gVisor an OOM takes the whole sandbox (the
// Sentry is what the host OOM killer sees); the Exec reports OOMKilled and
// the runner restarts the container: the workspace is kept, the agent and
// its REPL are new.
func TestRunscOOMRestarts(t *testing.T) {
	r := newRunscRunner(t, Config{ReconcileInterval: -1})
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone), Limits: runner.Limits{MemoryBytes: 96 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	s := sb.(*Sandbox)
	if _, err := s.Agent().REPL(t.Context(), agent.REPLRequest{Code: "x = 41"}, nil); err != nil {
		t.Fatal(err)
	}
	mustExec := func(args ...string) runner.Result {
		t.Helper()
		res, err := sb.Exec(t.Context(), runner.Process{Args: args, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("Exec %q: %v", args, err)
		}
		return res
	}
	mustExec("/bin/sh", "-c", "echo kept > /workspace/f")
	res := mustExec("/usr/bin/python3", "-c", `x = [b"x" * (1 << 20) for _ in range(1024)]`)
	if !res.OOMKilled || res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Fatalf("not reported as an OOM kill: %+v", res)
	}
	res = mustExec("/bin/cat", "/workspace/f")
	if string(res.Stdout) != "kept\n" || res.OOMKilled {
		t.Fatalf("after the restart: %+v", res)
	}
	rr, err := s.Agent().REPL(t.Context(), agent.REPLRequest{Code: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rr.OK {
		t.Errorf("REPL state survived a restart: %+v", rr)
	}
	rr, err = s.Agent().REPL(t.Context(), agent.REPLRequest{Code: "1+1"}, nil)
	if err != nil || rr.Value != "2" {
		t.Fatalf("REPL after the restart: %+v, %v", rr, err)
	}
	// Twice: each OOM restarts it again.
	res = mustExec("/usr/bin/python3", "-c", `x = [b"x" * (1 << 20) for _ in range(1024)]`)
	if !res.OOMKilled {
		t.Fatalf("second OOM: %+v", res)
	}
	mustExec("/bin/true")
}

// TestRunscCloseReaps is CloseReapsEverything made observable under gVisor,
// whose sandbox processes are invisible on the host: a daemon is seen from
// inside the sandbox before Close, and after Close none of runsc's host
// processes (sandbox, gofer, stubs) for the container is left.
func TestRunscCloseReaps(t *testing.T) {
	r := newRunscRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	cid := sb.(*Sandbox).ContainerID()
	if len(hostProcs(cid)) == 0 {
		t.Fatal("no runsc host process mentions the container")
	}
	tok := fmt.Sprintf("%d.%d", 4000+time.Now().UnixNano()%1000, time.Now().UnixNano()%1e9)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), runner.Process{Args: []string{"/bin/sh", "-c", "setsid sleep " + tok + " </dev/null >/dev/null 2>&1 & sleep " + tok}})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done`}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(res.Stdout), "\nsleep "+tok+" \n") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("test processes not seen inside: %q", res.Stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running 10s after Close")
	}
	deadline = time.Now().Add(5 * time.Second)
	for left := hostProcs(cid); len(left) > 0; left = hostProcs(cid) {
		if time.Now().After(deadline) {
			t.Fatalf("runsc processes left after Close: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left := r.leftovers(sb.ID()); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// hostProcs lists host processes whose command line contains s.
func hostProcs(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// TestRunscDaemonsKilled is DaemonsKilled made observable under gVisor
// (the conformance suite looks for the daemons among host processes, where
// gVisor's never are): daemons an Exec leaves behind are gone, seen from
// inside, by the next Exec; the REPL (in the agent's session) survives.
func TestRunscDaemonsKilled(t *testing.T) {
	r := newRunscRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	cl := sb.(*Sandbox).Agent()
	if _, err := cl.REPL(t.Context(), agent.REPLRequest{Code: "x = 41"}, nil); err != nil {
		t.Fatal(err)
	}
	tok := fmt.Sprintf("%d.%d", 4000+time.Now().UnixNano()%1000, time.Now().UnixNano()%1e9)
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", fmt.Sprintf(`setsid sleep %[1]s </dev/null >/dev/null 2>&1 &
setsid sh -c 'setsid sleep %[1]s & sleep %[1]s' </dev/null >/dev/null 2>&1 &
nohup sleep %[1]s </dev/null >/dev/null 2>&1 &
sleep 0.3; echo started`, tok)}})
	if err != nil || string(res.Stdout) != "started\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	res, err = sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), tok) {
		t.Fatalf("daemons outlived their Exec:\n%s", res.Stdout)
	}
	rr, err := cl.REPL(t.Context(), agent.REPLRequest{Code: "x + 1"}, nil)
	if err != nil || rr.Value != "42" {
		t.Fatalf("REPL after the sweep: %+v, %v", rr, err)
	}
}
