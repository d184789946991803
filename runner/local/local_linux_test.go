package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// agentPath and launcherPath are built by TestMain.
var agentPath, launcherPath string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandboxd-local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentPath, launcherPath = filepath.Join(dir, "sandbox-agent"), filepath.Join(dir, "sandbox-launch")
	if a, l := os.Getenv(umlAgentEnv), os.Getenv(umlLauncherEnv); a != "" && l != "" {
		agentPath, launcherPath = a, l // built outside (TestCgroupV2UML)
	}
	for out, pkg := range map[string]string{agentPath: "../../cmd/sandbox-agent", launcherPath: "../../cmd/sandbox-launch"} {
		if _, err := os.Stat(out); err == nil {
			continue
		}
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	code := m.Run()
	// Sandbox groups are removed by Close; remove this process's parent
	// groups too (rmdir fails harmlessly if anything is left in them).
	if h, err := detectCgroups(); err == nil {
		for _, d := range h.group(testCgroupParent()).dirs() {
			tenants, _ := filepath.Glob(filepath.Join(d, "tenant-*"))
			for _, tg := range tenants {
				_ = os.Remove(tg)
			}
			_ = os.Remove(d)
		}
	}
	return code
}

// testCgroupParent keeps concurrent test processes apart.
func testCgroupParent() string { return "sandboxd-test-" + strconv.Itoa(os.Getpid()) }

func testConfig(tb testing.TB) Config {
	return Config{StateDir: tb.TempDir(), CgroupParent: testCgroupParent(), AgentPath: agentPath, LauncherPath: launcherPath}
}

func newTestRunner(tb testing.TB) *Runner {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("the local runner needs root")
	}
	r, err := New(testConfig(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if len(r.missing) > 0 {
		tb.Fatalf("host lacks %v", r.missing)
	}
	return r
}

func TestConformance(t *testing.T) {
	r := newTestRunner(t)
	runnertest.Run(t, runnertest.Factory{
		New:             func(*testing.T) runner.Runner { return r },
		Leftovers:       r.Leftovers,
		DropsPrivileges: true,
		KillsDaemons:    true,
		PrivateRootView: true,
	})
}

func TestCapabilitiesAndFailClosed(t *testing.T) {
	r := newTestRunner(t)
	c := r.Capabilities()
	if !c.PIDNamespace || !c.NetNamespace || !c.MountNamespace || !c.Cgroups || !c.Seccomp || !c.Network {
		t.Fatalf("capabilities %+v", c)
	}
	// A host lacking a feature: Create refuses, naming it.
	weak := &Runner{cfg: r.cfg, cg: r.cg, caps: r.caps, missing: []string{"seccomp"}, live: map[string]*Sandbox{}}
	_, err := weak.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if !errors.Is(err, runner.ErrUnsupported) || !strings.Contains(err.Error(), "seccomp") {
		t.Fatalf("Create on a weak host: %v", err)
	}
	_, err = r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress)})
	if !errors.Is(err, runner.ErrInvalidSpec) {
		t.Fatalf("egress without SandboxSpec.Egress: %v", err)
	}
	// Without a network namespace there is no egress (it would be the
	// host's network).
	nonet := &Runner{cfg: r.cfg, cg: r.cg, caps: r.caps, live: map[string]*Sandbox{}}
	nonet.caps.NetNamespace, nonet.caps.Network = false, false
	_, err = nonet.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: refuseEgress{}})
	if !errors.Is(err, runner.ErrUnsupported) {
		t.Fatalf("egress without a network namespace: %v", err)
	}
	bogus := *runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	bogus.Workspace = "bogus"
	for _, spec := range []runner.SandboxSpec{
		{ID: "../x", Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)},
		{Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)},
		{Workspace: "relative", Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)},
		{Isolation: &bogus},
		{}, // no compiled isolation
	} {
		if _, err := r.Create(t.Context(), spec); !errors.Is(err, runner.ErrInvalidSpec) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidSpec", spec, err)
		}
	}
}

func TestReap(t *testing.T) {
	r := newTestRunner(t)
	ws := t.TempDir()
	sb, err := r.Create(t.Context(), runner.SandboxSpec{ID: "reapme", Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a crashed owner: a process stuck in the cgroup and a record
	// whose owner pid is dead.
	s := sb.(*Sandbox)
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	if err := s.cg.add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	own := s.owner
	own.PID, own.Start = 999999999, "1"
	if err := writeOwner(s.stateDir, own); err != nil {
		t.Fatal(err)
	}
	// A fresh runner (a restarted daemon) on the same state dir reaps it.
	cfg := testConfig(t)
	cfg.StateDir = r.cfg.StateDir
	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := r2.Reap(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	done := make(chan struct{})
	go func() { sleeper.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process in the reaped cgroup survived")
	}
	if left := r2.Leftovers("reapme"); len(left) > 0 {
		t.Fatalf("left after Reap: %v", left)
	}
	fi, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fileUID(fi); uid != 0 {
		t.Errorf("workspace owner not restored: uid %d", uid)
	}
	// Live sandboxes of a live runner are not reaped.
	sb2, err := r2.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close(context.Background())
	if n, err := r2.Reap(t.Context()); err != nil || n != 0 {
		t.Fatalf("Reap with a live sandbox = %d, %v", n, err)
	}
	if _, err := sb2.Exec(t.Context(), runner.Process{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	_ = sb.Close(t.Context())
}

// TestReapEmptyCgroups: the empty cgroup of a sandbox whose record is
// gone (its runner killed, its data dir removed) is removed; one holding a
// process, one with a child group, a fresh one and this runner's open
// sandbox's are not.
func TestReapEmptyCgroups(t *testing.T) {
	r := newTestRunner(t)
	if r.cg == nil {
		t.Skip("no cgroups")
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	mk := func(rel string) *cgroup {
		t.Helper()
		g := r.cg.group(filepath.Join(r.cfg.CgroupParent, rel))
		for _, d := range g.dirs() {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = g.destroy(time.Second) })
		return g
	}
	orphan, tenantOrphan := mk("job_orphan"), mk(filepath.Join("tenant-reaptest", "job_orphan2"))
	busy := mk("job_busy")
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	if err := busy.add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	parent := mk("job_parent")
	mk(filepath.Join("job_parent", "child"))

	// Nothing is old enough yet.
	if n := r.reapEmptyCgroups(time.Now().Add(-time.Minute)); n != 0 {
		t.Fatalf("fresh groups reaped: %d", n)
	}
	if n := r.reapEmptyCgroups(time.Now().Add(time.Second)); n != 2 {
		t.Errorf("reaped %d groups, want the 2 empty orphans", n)
	}
	for _, g := range []*cgroup{orphan, tenantOrphan} {
		if left := g.exists(); len(left) > 0 {
			t.Errorf("empty orphan left: %v", left)
		}
	}
	for _, g := range []*cgroup{busy, parent, sb.(*Sandbox).cg} {
		if len(g.exists()) == 0 {
			t.Errorf("%s removed", g.rel)
		}
	}
	if _, err := sb.Exec(t.Context(), runner.Process{Args: []string{"true"}}); err != nil {
		t.Fatalf("the open sandbox after the reap: %v", err)
	}
}

func TestRootfs(t *testing.T) {
	r := newTestRunner(t)
	// A minimal image: /bin/sh and the libraries it links, plus a marker.
	rootfs := t.TempDir()
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proc", "dev", "tmp", "run", "workspace", "etc", "bin"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "marker"), []byte("from-image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", "/bin/sh").Output()
	if err != nil {
		t.Skipf("ldd: %v", err)
	}
	files := []string{"/bin/sh"}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			files = append(files, f)
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(rootfs, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Image: rootfs})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", `read x < /etc/marker; echo "$x"; test -e /usr/bin/python3 && echo host-visible; echo > /etc/new || echo ro`}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "from-image\nro\n" {
		t.Fatalf("image rootfs: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}
}

func TestRlimitsAndThreads(t *testing.T) {
	r := newTestRunner(t)
	ws := t.TempDir()
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone),
		Limits: runner.Limits{FileSize: 1 << 20, NoFile: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", "exec head -c 2000000 /dev/zero > big"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Signal != "SIGXFSZ" {
		t.Fatalf("file size limit not enforced: %+v", res)
	}
	if fi, err := os.Stat(filepath.Join(ws, "big")); err != nil || fi.Size() > 1<<20 {
		t.Fatalf("big file: %v %v", fi, err)
	}
	res, err = sb.Exec(t.Context(), runner.Process{Args: []string{pythonPath, "-c", `import os, threading, resource
print(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_CORE))
fds = []
try:
    while len(fds) < 1000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print("opened", len(fds))
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print("threads", len(out))`}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "(64, 64) (0, 0)\nopened 61\nthreads 8\n" {
		t.Fatalf("rlimits/threads: %q %q", res.Stdout, res.Stderr)
	}
}

// TestReadOnlyMountsAsAgent attacks the mount layer alone, with what the
// agent itself could do if the code took it over: a probe runs in the
// agent's place (uid 0 with the agent's capabilities, CAP_DAC_OVERRIDE and
// CAP_FOWNER among them, so file permissions do not stop it) with Landlock
// off. Its output comes back in Create's error (it never says "ready").
func TestReadOnlyMountsAsAgent(t *testing.T) {
	r := newTestRunner(t)
	r.caps.Landlock = false
	name := "sandboxd-rootprobe-" + strconv.Itoa(os.Getpid())
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, []byte("#!"+pythonPath+` -I
import os, sys
name = "`+name+`"
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("uid", os.getuid(), "caps", st["CapEff"].strip())
for d in ["/", "/usr", "/etc", "/dev", "/run", "/workspace", "/proc/sys/kernel"]:
    try:
        open(os.path.join(d, name), "w").write("x")
        print("WROTE", d)
    except OSError as e:
        print("denied", d, e.strerror)
# Opening for writing is the proof; nothing is written to existing files.
for p in ["/workspace/in.txt", "/etc/hostname", "/usr/bin/env", "/run/sandboxd-agent/sandbox-agent", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"]:
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        print("WROTE", p)
    except OSError as e:
        print("denied", p, e.strerror)
open("/tmp/" + name, "w").write("tmp ok")
print("tmp ok")
`), 0o755); err != nil {
		t.Fatal(err)
	}
	r.cfg.AgentPath = probe
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("ro"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // in case the mounts were writable after all
		for _, d := range []string{"/usr", "/etc", "/dev", ws} {
			os.Remove(filepath.Join(d, name))
		}
	})
	_, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)})
	if err == nil {
		t.Fatal("the probe started as an agent")
	}
	out := err.Error()
	t.Logf("probe: %s", out)
	caps := fmt.Sprintf("%016x", policy.AgentCapabilityMask())
	if !strings.Contains(out, "uid 0 caps "+caps) || strings.Contains(out, "WROTE") || !strings.Contains(out, "tmp ok") ||
		strings.Count(out, "denied") != 13 {
		t.Fatalf("read-only mounts as the agent:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "in.txt")); string(b) != "ro" {
		t.Fatalf("workspace file changed: %q", b)
	}
}

func TestRelativeCommandAndDir(t *testing.T) {
	r := newTestRunner(t)
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "sub", "run.sh"), []byte("#!/bin/sh\necho \"$(pwd) $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	for _, tc := range []struct {
		p    runner.Process
		want string
	}{
		{runner.Process{Args: []string{"./run.sh", "a"}, Dir: "/workspace/sub"}, "/workspace/sub a\n"},
		{runner.Process{Args: []string{"sub/run.sh", "b"}}, "/workspace b\n"},
		{runner.Process{Args: []string{"run.sh"}, Env: []string{"PATH=/workspace/sub:/usr/bin:/bin"}}, "/workspace \n"},
	} {
		res, err := sb.Exec(t.Context(), tc.p)
		if err != nil || string(res.Stdout) != tc.want {
			t.Errorf("%q in %q: %q %q %v", tc.p.Args, tc.p.Dir, res.Stdout, res.Stderr, err)
		}
	}
}

// refuseEgress closes every connection.
type refuseEgress struct{}

func (refuseEgress) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return nil
		}
		c.Close()
	}
}
