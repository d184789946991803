package containerd

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

var (
	agentPath  string // built by TestMain
	skipReason string // non-empty: no daemon, and SANDBOXD_REQUIRE_CONTAINERD unset
	testState  string
	address    = envOr("CONTAINERD_ADDRESS", DefaultAddress)
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Getenv(orphanEnv) != "" {
		return orphanMain()
	}
	dir, err := os.MkdirTemp("", "sbd-ctrd-") // short: socket paths live under it
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	testState = filepath.Join(dir, "state")
	agentPath = filepath.Join(dir, "sandbox-agent")
	build := exec.Command("go", "build", "-o", agentPath, "github.com/sandboxd/sandboxd/cmd/sandbox-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build sandbox-agent: %v\n%s", err, out)
		return 1
	}
	if err := pingDaemon(); err != nil {
		if os.Getenv("SANDBOXD_REQUIRE_CONTAINERD") != "" {
			fmt.Fprintf(os.Stderr, "SANDBOXD_REQUIRE_CONTAINERD is set but containerd is not usable: %v\n", err)
			return 1
		}
		skipReason = "containerd not usable: " + err.Error() + " (run scripts/containerd-setup.sh; set SANDBOXD_REQUIRE_CONTAINERD=1 to fail instead of skipping)"
	}
	code := m.Run()
	if skipReason == "" {
		cleanupOwn(dir)
	}
	return code
}

// cleanupOwn removes what tests of this process left when they failed
// before Close (a runner's Reap keeps the sandboxes of a live owner).
func cleanupOwn(dir string) {
	r := &Runner{cfg: Config{Address: address, Namespace: DefaultNamespace, Snapshotter: DefaultSnapshotter, StateDir: testState, InstanceID: "cleanup"}}
	c, err := client.New(address, client.WithDefaultNamespace(DefaultNamespace))
	if err != nil {
		return
	}
	defer c.Close()
	r.c = c
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, _ := c.ContainerService().List(ctx, managedFilter)
	for _, ct := range list {
		if ct.Labels[hostside.LabelOwnerProc] == hostside.SelfProc() {
			fmt.Fprintf(os.Stderr, "containerd test: removing leftover sandbox %s\n", ct.ID)
			r.remove(ctx, ct.ID)
			hostside.RestoreWorkspace(ct.Labels)
		}
	}
	unmountUnder(dir)
}

// pingDaemon checks containerd answers and has the test image, importing
// it from scripts/build-images.sh --oci archives when they are there.
func pingDaemon() error {
	if _, err := os.Stat(address); err != nil {
		return err
	}
	c, err := client.New(address, client.WithDefaultNamespace(DefaultNamespace))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Version(ctx); err != nil {
		return err
	}
	_, err = c.GetImage(ctx, normalizeRef(DefaultImage))
	if errdefs.IsNotFound(err) {
		archive := filepath.Join(envOr("OCI_DIR", "/var/cache/sandboxd/oci"), "sandboxd-python.tar")
		if _, serr := os.Stat(archive); serr != nil {
			return fmt.Errorf("image %s missing and no archive %s", DefaultImage, archive)
		}
		_, err = ImportArchive(ctx, address, DefaultNamespace, DefaultSnapshotter, archive)
	}
	if err != nil {
		return fmt.Errorf("image %s: %w", DefaultImage, err)
	}
	return nil
}

// shortTempDir is t.TempDir where a test's name would make the sandboxes'
// socket paths too long (hostside.MaxSocketPath).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func needContainerd(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
}

func newTestRunner(tb testing.TB, cfg Config) *Runner {
	tb.Helper()
	needContainerd(tb)
	if cfg.Address == "" {
		cfg.Address = address
	}
	if cfg.AgentPath == "" {
		cfg.AgentPath = agentPath
	}
	if cfg.StateDir == "" {
		cfg.StateDir = testState
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// leftovers lists what sandbox id left: its container, task, snapshot,
// cgroup, network namespace pin and state dir.
func (r *Runner) leftovers(id string) []string {
	var left []string
	ctx, cancel := context.WithTimeout(context.Background(), hostside.APITimeout)
	defer cancel()
	if _, err := r.c.ContainerService().Get(ctx, id); err == nil {
		left = append(left, "container "+id)
	}
	if _, err := r.c.SnapshotService(r.cfg.Snapshotter).Stat(ctx, id); err == nil {
		left = append(left, "snapshot "+id)
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		p := filepath.Join("/sys/fs/cgroup", ctl, r.cfg.Namespace, id)
		if _, err := os.Stat(p); err == nil {
			left = append(left, "cgroup "+p)
		}
	}
	dir := filepath.Join(r.host.State.Dir, id)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), dir) {
		left = append(left, "mount under "+dir)
	}
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "state dir "+dir)
	}
	return left
}

func TestConformance(t *testing.T) {
	r := newTestRunner(t, Config{})
	runnertest.Run(t, runnertest.Factory{
		New:             func(t *testing.T) runner.Runner { return r },
		Leftovers:       r.leftovers,
		DropsPrivileges: true,
		KillsDaemons:    true,
	})
}

// TestConformanceRunsc runs the suite under gVisor (Runtime "runsc").
func TestConformanceRunsc(t *testing.T) {
	needContainerd(t)
	if fi, err := os.Stat(DefaultRunscBinary); err != nil || fi.Mode()&0o111 == 0 {
		reason := fmt.Sprintf("gVisor not usable: %s missing (run scripts/gvisor-setup.sh, then scripts/containerd-setup.sh)", DefaultRunscBinary)
		if os.Getenv("SANDBOXD_REQUIRE_GVISOR") != "" {
			t.Fatal("SANDBOXD_REQUIRE_GVISOR is set but " + reason)
		}
		t.Skip(reason + "; set SANDBOXD_REQUIRE_GVISOR=1 to fail instead of skipping")
	}
	r := newTestRunner(t, Config{Runtime: RuntimeRunsc})
	runnertest.Run(t, runnertest.Factory{
		New:             func(t *testing.T) runner.Runner { return r },
		Leftovers:       r.leftovers,
		DropsPrivileges: true,
		KillsDaemons:    true,
		KnownLeaks:      runnertest.GVisorKnownLeaks,
		KnownGaps:       runnertest.GVisorKnownGaps,
	})
}

// orphanEnv makes the test binary a sandboxd stand-in that creates one
// sandbox, prints its ID and waits to be killed (TestReapAfterKill).
const orphanEnv = "SANDBOXD_CONTAINERD_TEST_ORPHAN"

func orphanMain() int {
	r, err := New(context.Background(), Config{Address: address, AgentPath: os.Getenv("AGENT"), StateDir: os.Getenv("STATE"), ReconcileInterval: -1})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ws := os.Getenv("WORKSPACE")
	sb, err := r.Create(context.Background(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("sandbox", sb.ID())
	select {}
}

// TestReapAfterKill: a process that created a sandbox is killed with
// SIGKILL; a new runner's New reaps its task, container, snapshot, network
// namespace and state dir, and gives the workspace back.
func TestReapAfterKill(t *testing.T) {
	needContainerd(t)
	state := filepath.Join(shortTempDir(t), "state")
	ws := t.TempDir()
	os.Chmod(filepath.Dir(ws), 0o755)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanEnv+"=1", "AGENT="+agentPath, "STATE="+state, "WORKSPACE="+ws)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "sandbox ")
	if err != nil || !ok {
		t.Fatalf("orphan: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if fi, _ := os.Stat(ws); fi.Sys().(*syscall.Stat_t).Uid != hostside.SandboxUID {
		t.Fatal("workspace not chowned to the sandbox user")
	}
	r := newTestRunner(t, Config{StateDir: state, ReconcileInterval: -1})
	ctx := t.Context()
	if _, err := r.c.ContainerService().Get(ctx, id); err == nil {
		t.Error("container of a killed owner survived New")
	}
	if _, err := r.c.SnapshotService(DefaultSnapshotter).Stat(ctx, id); err == nil {
		t.Error("snapshot of a killed owner survived New")
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), state) {
		t.Error("network namespace pin of a killed owner still mounted")
	}
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		if e.Name() != r.cfg.InstanceID {
			t.Errorf("state dir %s of a killed owner survived", e.Name())
		}
	}
	if fi, _ := os.Stat(ws); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("workspace owner not restored")
	}
}
