package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

const testImage = DefaultImage

var (
	agentPath  string // built by TestMain
	skipReason string // non-empty: no daemon, and SANDBOXD_REQUIRE_DOCKER unset
	testState  string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandboxd-docker-test-")
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
		if os.Getenv("SANDBOXD_REQUIRE_DOCKER") != "" {
			fmt.Fprintf(os.Stderr, "SANDBOXD_REQUIRE_DOCKER is set but Docker is not usable: %v\n", err)
			return 1
		}
		skipReason = "Docker not usable: " + err.Error() + " (set SANDBOXD_REQUIRE_DOCKER=1 to fail instead of skipping)"
	}
	return m.Run()
}

func pingDaemon() error {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return err
	}
	_, err = c.ImageInspect(ctx, testImage)
	if err != nil {
		return fmt.Errorf("image %s: %w", testImage, err)
	}
	return nil
}

func needDocker(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
}

func newTestRunner(tb testing.TB, cfg Config) *Runner {
	tb.Helper()
	needDocker(tb)
	if cfg.AgentPath == "" {
		cfg.AgentPath = agentPath
	}
	if cfg.StateDir == "" {
		cfg.StateDir = testState
	}
	if cfg.Image == "" {
		cfg.Image = testImage
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// leftovers lists containers of sandbox id and its state dir.
func (r *Runner) leftovers(id string) []string {
	var left []string
	ctx, cancel := context.WithTimeout(context.Background(), hostside.APITimeout)
	defer cancel()
	list, err := r.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", hostside.LabelSandbox+"="+id)})
	if err != nil {
		return []string{"list containers: " + err.Error()}
	}
	for _, c := range list.Items {
		left = append(left, "container "+c.ID[:12]+" "+string(c.State))
	}
	if _, err := os.Stat(filepath.Join(r.host.State.Dir, id)); err == nil {
		left = append(left, "state dir "+filepath.Join(r.host.State.Dir, id))
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

func TestContainerIsolation(t *testing.T) {
	r := newTestRunner(t, Config{})
	ws := t.TempDir()
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone), Labels: map[string]string{"tenant": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if err := sb.(*Sandbox).Agent().Ping(t.Context()); err != nil {
		t.Fatalf("agent ping: %v", err)
	}
	insp, err := r.inspect(t.Context(), sb.(*Sandbox).ContainerID())
	if err != nil {
		t.Fatal(err)
	}
	hc := insp.HostConfig
	if !hc.ReadonlyRootfs {
		t.Error("root fs is writable")
	}
	if len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || !slices.Equal(hc.CapAdd, hostside.AgentCapabilities()) {
		t.Errorf("CapDrop %v CapAdd %v, want ALL and %v", hc.CapDrop, hc.CapAdd, hostside.AgentCapabilities())
	}
	if string(hc.NetworkMode) != "none" {
		t.Errorf("NetworkMode %q", hc.NetworkMode)
	}
	if insp.Config.User != "0:0" {
		t.Errorf("User %q, want the agent's 0:0", insp.Config.User)
	}
	// The agent as the kernel sees it (runc: the container's pid is the
	// agent), and its state dir.
	if err := hostside.VerifyAgentProcess(insp.State.Pid); err != nil {
		t.Error(err)
	}
	if err := hostside.VerifyStateDir(sb.(*Sandbox).stateDir); err != nil {
		t.Error(err)
	}
	var nnp, seccomp bool
	for _, o := range hc.SecurityOpt {
		switch {
		case o == "no-new-privileges":
			nnp = true
		case strings.HasPrefix(o, "seccomp="):
			want, _ := seccompJSON(runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone).Seccomp)
			seccomp = strings.TrimPrefix(o, "seccomp=") == want && strings.Contains(o, `"defaultAction":"SCMP_ACT_ERRNO"`)
		}
	}
	if !nnp || !seccomp {
		t.Errorf("no-new-privileges %v, our seccomp profile %v", nnp, seccomp)
	}
	if hc.Privileged || hc.PidMode != "" || hc.IpcMode != "private" || hc.Init == nil || *hc.Init {
		t.Errorf("Privileged %v PidMode %q IpcMode %q Init %v", hc.Privileged, hc.PidMode, hc.IpcMode, hc.Init)
	}
	if hc.Memory != hostside.DefaultLimits.MemoryBytes || hc.MemorySwap != hc.Memory || hc.PidsLimit == nil || *hc.PidsLimit != hostside.DefaultLimits.PIDs || hc.NanoCPUs != 1e9 {
		t.Errorf("Memory %d swap %d pids %v cpus %d", hc.Memory, hc.MemorySwap, hc.PidsLimit, hc.NanoCPUs)
	}
	targets := map[string]bool{}
	for _, m := range insp.Mounts {
		targets[m.Destination] = m.RW
	}
	want := map[string]bool{hostside.AgentBinary: false, hostside.AgentDir: true, runner.WorkspaceDir: false}
	if len(targets) != len(want) {
		t.Errorf("mounts %v, want %v", targets, want)
	}
	for d, rw := range want {
		if got, ok := targets[d]; !ok || got != rw {
			t.Errorf("mount %s: present %v rw %v, want rw %v", d, ok, got, rw)
		}
	}
	l := insp.Config.Labels
	if l[hostside.LabelManaged] != "true" || l[hostside.LabelOwner] != r.cfg.InstanceID || l[hostside.LabelSandbox] != sb.ID() || l["tenant"] != "t1" {
		t.Errorf("labels %v", l)
	}
}

func TestReapForeignOwner(t *testing.T) {
	needDocker(t)
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	name := "sandboxd-test-foreign-" + hostside.NewID()
	resp, err := api.ContainerCreate(t.Context(), client.ContainerCreateOptions{Config: &container.Config{
		Image: testImage, Entrypoint: []string{"sleep", "300"},
		Labels: map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: "previous-" + hostside.NewID(), hostside.LabelSandbox: name},
	}, HostConfig: &container.HostConfig{NetworkMode: "none"}, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer api.ContainerRemove(context.Background(), resp.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := api.ContainerStart(t.Context(), resp.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	// A dead instance's state dir (its owner record names a process that
	// is gone) goes too.
	staleState := filepath.Join(testState, "previous-instance", "stale")
	if err := os.MkdirAll(staleState, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(testState, "previous-instance", hostside.OwnerRecord), []byte("999999999:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Dir(staleState), old, old)
	time.Sleep(1100 * time.Millisecond) // created strictly before the runner starts
	// A runner that started earlier leaves it alone: it may belong to a
	// live sandboxd sharing the daemon.
	r := newTestRunner(t, Config{ReconcileInterval: -1}) // New reaps
	if _, err := api.ContainerInspect(t.Context(), resp.ID, client.ContainerInspectOptions{}); err == nil {
		t.Fatal("container of a previous owner survived New")
	}
	if _, err := os.Stat(staleState); err == nil {
		t.Fatal("stale state dir survived New")
	}
	// Our own unheld container is reaped by Reap too.
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	cid := sb.(*Sandbox).ContainerID()
	r.host.Forget(sb.ID()) // as if Close had lost track of it
	n, err := r.Reap(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	if _, err := api.ContainerInspect(t.Context(), cid, client.ContainerInspectOptions{}); err == nil {
		t.Fatal("unheld container survived Reap")
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("Close after reap: %v", err)
	}
}

func TestDaemonUnavailable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := New(t.Context(), Config{Host: "unix://" + filepath.Join(t.TempDir(), "dead.sock"), AgentPath: agentPath, StateDir: shortTempDir(t)})
	if !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("New with a dead socket: %v, want ErrUnavailable", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
	t.Log(err)
}

func TestAgentFailsToStart(t *testing.T) {
	needDocker(t)
	bad := filepath.Join(t.TempDir(), "broken-agent")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho agent-is-broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(bad), 0o755)
	r := newTestRunner(t, Config{AgentPath: bad, ReconcileInterval: -1})
	start := time.Now()
	_, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), ID: "broken-" + hostside.NewID()})
	if err == nil || !strings.Contains(err.Error(), "agent-is-broken") {
		t.Fatalf("Create with a broken agent: %v; want the container's log in the error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v to notice the agent died", el)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostside.APITimeout)
	defer cancel()
	list, _ := r.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", hostside.LabelOwner+"="+r.cfg.InstanceID)})
	if len(list.Items) != 0 {
		t.Fatalf("failed Create left %d containers", len(list.Items))
	}
	t.Log(err)
}

func TestContainerDiesMidExec(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	time.AfterFunc(300*time.Millisecond, func() {
		api.ContainerKill(context.Background(), sb.(*Sandbox).ContainerID(), client.ContainerKillOptions{Signal: "KILL"})
	})
	start := time.Now()
	_, err = sb.Exec(t.Context(), runner.Process{Args: []string{"sleep", "30"}})
	if !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("Exec in a killed container: %v, want ErrUnavailable", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	if _, err := sb.Exec(t.Context(), runner.Process{Args: []string{"true"}}); !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("Exec after the container died: %v, want ErrUnavailable", err)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("Close of a dead sandbox: %v", err)
	}
	if left := r.leftovers(sb.ID()); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	t.Log(err)
}

// TestReapByOwnerLiveness: a container whose owning process is dead is
// reaped however recently it was created (a pool refill just before
// kill -9), one whose owner still runs is kept.
func TestReapByOwnerLiveness(t *testing.T) {
	needDocker(t)
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(proc string) string {
		name := "sandboxd-test-owner-" + hostside.NewID()
		resp, err := api.ContainerCreate(t.Context(), client.ContainerCreateOptions{Config: &container.Config{
			Image: testImage, Entrypoint: []string{"sleep", "300"},
			Labels: map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: "other-" + hostside.NewID(), hostside.LabelSandbox: name, hostside.LabelOwnerProc: proc},
		}, HostConfig: &container.HostConfig{NetworkMode: "none"}, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { api.ContainerRemove(context.Background(), resp.ID, client.ContainerRemoveOptions{Force: true}) })
		return resp.ID
	}
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	deadID := mk(fmt.Sprintf("%d:1", dead.Process.Pid))
	liveID := mk(hostside.SelfProc())
	if _, err := r.Reap(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ContainerInspect(t.Context(), deadID, client.ContainerInspectOptions{}); err == nil {
		t.Fatal("container of a dead owner survived Reap")
	}
	if _, err := api.ContainerInspect(t.Context(), liveID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("container of a live owner was reaped: %v", err)
	}
}

func TestOwnerAlive(t *testing.T) {
	for _, tc := range []struct {
		label        string
		alive, known bool
	}{
		{hostside.SelfProc(), true, true},
		{fmt.Sprintf("%d:1", os.Getpid()), false, true}, // pid reused by another process
		{"999999999:5", false, true},
		{"", false, false},
		{"abc:def", false, false},
		{"12", false, false},
	} {
		alive, known := hostside.OwnerAlive(tc.label)
		if alive != tc.alive || known != tc.known {
			t.Errorf("hostside.OwnerAlive(%q) = %v, %v; want %v, %v", tc.label, alive, known, tc.alive, tc.known)
		}
	}
}

// garbageAgent answers the runner's ping like the real agent, then answers
// the next request with bytes that are not a frame.
const garbageAgent = `#!/usr/bin/python3
import json, os, socket, struct, sys
path = sys.argv[sys.argv.index("--socket") + 1]
if os.path.exists(path):
    os.remove(path)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o666)
s.listen(1)
def serve(c):
    while True:
        hdr = c.recv(4, socket.MSG_WAITALL)
        if len(hdr) < 4:
            return
        req = json.loads(c.recv(struct.unpack(">I", hdr)[0], socket.MSG_WAITALL))
        if req["type"] == "ping":
            body = json.dumps({"id": req["id"], "type": "result"}).encode()
            c.sendall(struct.pack(">I", len(body)) + body)
        else:
            c.sendall(b"\xff\xff\xff\xffnot a frame at all")
while True:  # stays up whatever the peer does: only the runner may end it
    c, _ = s.accept()
    try:
        serve(c)
    except Exception as e:
        print("garbage agent:", e, file=sys.stderr)
`

// TestGarbageAgentKilled: a sandbox whose agent breaks the protocol fails
// the call with an error and is killed; the daemon side stays up.
func TestGarbageAgentKilled(t *testing.T) {
	needDocker(t)
	script := filepath.Join(t.TempDir(), "garbage-agent")
	if err := os.WriteFile(script, []byte(garbageAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newTestRunner(t, Config{AgentPath: script, ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	_, err = sb.Exec(t.Context(), runner.Process{Args: []string{"true"}})
	if err == nil {
		t.Fatal("exec against a garbage-speaking agent succeeded")
	}
	t.Logf("exec: %v", err)
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		insp, err := api.ContainerInspect(t.Context(), sb.(*Sandbox).ContainerID(), client.ContainerInspectOptions{})
		if err != nil || !insp.Container.State.Running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox of a garbage-speaking agent still runs")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
