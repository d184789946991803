package containerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

func TestContainerIsolation(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	ws := t.TempDir()
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone), Labels: map[string]string{"tenant": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	s := sb.(*Sandbox)
	if err := s.Agent().Ping(t.Context()); err != nil {
		t.Fatalf("agent ping: %v", err)
	}
	info, err := s.container.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l := info.Labels
	if l[hostside.LabelManaged] != "true" || l[hostside.LabelOwner] != r.cfg.InstanceID || l[hostside.LabelSandbox] != sb.ID() || l["tenant"] != "t1" || l[hostside.LabelOwnerProc] != hostside.SelfProc() {
		t.Errorf("labels %v", l)
	}
	if info.Snapshotter != DefaultSnapshotter || info.Runtime.Name != RuntimeRunc {
		t.Errorf("snapshotter %q runtime %q", info.Snapshotter, info.Runtime.Name)
	}
	spec, err := s.container.Spec(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !spec.Root.Readonly || spec.Process.User.UID != hostside.AgentUID || !spec.Process.NoNewPrivileges || !slices.Equal(spec.Process.Capabilities.Bounding, hostside.AgentCapabilities()) || spec.Linux.Seccomp == nil {
		t.Errorf("spec root ro %v user %+v nnp %v caps %v seccomp %v", spec.Root.Readonly, spec.Process.User, spec.Process.NoNewPrivileges, spec.Process.Capabilities, spec.Linux.Seccomp != nil)
	}
	// The agent as the kernel sees it (runc: the task's pid is the
	// agent), and its run dir.
	if err := hostside.VerifyAgentProcess(int(s.cur.task.Pid())); err != nil {
		t.Error(err)
	}
	if err := hostside.VerifyStateDir(s.runDir); err != nil {
		t.Error(err)
	}
	var netns string
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			netns = ns.Path
		}
	}
	if netns != s.NetnsPath() {
		t.Errorf("netns %q, want %q", netns, s.NetnsPath())
	}
	// Inside: loopback is up and usable, nothing else is there, the
	// limits and the seccomp filter are in force.
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/usr/bin/python3", "-c", `
import os, socket
print(sorted(os.listdir("/sys/class/net")))
print(open("/sys/class/net/lo/operstate").read().strip(), int(open("/sys/class/net/lo/flags").read(), 16) & 1)
u = socket.socket(socket.AF_UNIX)
print("unix ok")
try:
    socket.socket(socket.AF_INET)
    print("inet allowed")
except PermissionError:
    print("inet denied")
for line in open("/proc/self/status"):
    if line.startswith(("Seccomp:", "NoNewPrivs:", "CapEff:", "Uid:")):
        print(line.split(":")[0], line.split()[1])
`}})
	if err != nil {
		t.Fatal(err)
	}
	want := "['lo']\nunknown 1\nunix ok\ninet denied\nUid 65534\nCapEff 0000000000000000\nNoNewPrivs 1\nSeccomp 2\n"
	if string(res.Stdout) != want {
		t.Errorf("inside:\n%s\nstderr %s\nwant:\n%s", res.Stdout, res.Stderr, want)
	}
}

// TestLoopbackUsable: in an egress sandbox (inet sockets allowed) a server
// and a client talk over 127.0.0.1: the runner brought lo up.
func TestLoopbackUsable(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	if !agentHasEgress() {
		t.Skip("sandbox-agent lacks --egress-listen (egress support not merged yet)")
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: refuseEgress{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/usr/bin/python3", "-c", `
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.sendall(b"hi"); print(a.recv(2).decode())
`}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "hi" {
		t.Fatalf("loopback: %v %+v stderr %s", err, res, res.Stderr)
	}
}

type refuseEgress struct{}

func (refuseEgress) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}

var agentEgress = sync.OnceValue(func() bool {
	out, _ := exec.Command(agentPath, "--help").CombinedOutput()
	return strings.Contains(string(out), "egress-listen")
})

func agentHasEgress() bool { return agentPath != "" && agentEgress() }

// proxyEgress is a minimal HTTP forward proxy (plain HTTP only) that
// records the requests it saw, for the egress test.
type proxyEgress struct {
	mu   sync.Mutex
	seen []string
}

func (p *proxyEgress) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			p.mu.Lock()
			p.seen = append(p.seen, req.Method+" "+req.URL.String())
			p.mu.Unlock()
			req.RequestURI = ""
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
				return
			}
			defer resp.Body.Close()
			resp.Write(c)
		}()
	}
}

// TestEgress: a NetworkEgress sandbox reaches a host server (started by
// the test on loopback) only through the egress proxy the runner serves.
func TestEgress(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	if !agentHasEgress() {
		t.Skip("sandbox-agent lacks --egress-listen (egress support not merged yet)")
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from host") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	p := &proxyEgress{}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: p})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	url := "http://" + ln.Addr().String() + "/x"
	res, err := sb.Exec(t.Context(), runner.Process{
		Args: []string{"/usr/bin/python3", "-c", `
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
try:
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(sys.argv[1], timeout=3)
    print("direct reached")
except Exception as e:
    print("direct refused")
`, url},
		Env: []string{"HTTP_PROXY=http://" + runner.EgressProxyAddr, "http_proxy=http://" + runner.EgressProxyAddr},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello from host\ndirect refused\n" {
		t.Fatalf("stdout %q stderr %s", res.Stdout, res.Stderr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 1 || p.seen[0] != "GET "+url {
		t.Fatalf("proxy saw %v", p.seen)
	}
	// Close closes the listener and removes the socket.
	sock := filepath.Join(sb.(*Sandbox).runDir, "egress.sock")
	sb.Close(t.Context())
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("egress socket after Close: %v", err)
	}
}

// TestNoOutputLost runs 1,000 short execs over a few sandboxes in
// parallel and checks every output arrived whole (cio streams lost stdout
// of short runs on this machine; the agent channel must not).
func TestNoOutputLost(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	const sandboxes, perSandbox = 4, 250
	var wg sync.WaitGroup
	errs := make(chan error, sandboxes)
	for i := range sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
			if err != nil {
				errs <- err
				return
			}
			defer sb.Close(context.Background())
			for j := range perSandbox {
				n := strconv.Itoa(i*perSandbox + j)
				res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"echo", n}})
				if err != nil {
					errs <- fmt.Errorf("exec %s: %w", n, err)
					return
				}
				if string(res.Stdout) != n+"\n" || res.ExitCode != 0 {
					errs <- fmt.Errorf("exec %s: stdout %q exit %d", n, res.Stdout, res.ExitCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDaemonUnavailable(t *testing.T) {
	t.Parallel()
	// A stale socket: a file nobody listens on.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	for _, addr := range []string{filepath.Join(t.TempDir(), "dead.sock"), stale} {
		start := time.Now()
		_, err := New(t.Context(), Config{Address: addr, AgentPath: agentPath, StateDir: shortTempDir(t)})
		if !errors.Is(err, runner.ErrUnavailable) {
			t.Fatalf("New with %s: %v, want ErrUnavailable", addr, err)
		}
		if el := time.Since(start); el > 7*time.Second {
			t.Fatalf("took %v", el)
		}
		t.Log(err)
	}
}

func TestAgentFailsToStart(t *testing.T) {
	needContainerd(t)
	bad := filepath.Join(t.TempDir(), "broken-agent")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho agent-is-broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(bad), 0o755)
	r := newTestRunner(t, Config{AgentPath: bad, ReconcileInterval: -1})
	start := time.Now()
	id := "broken-" + hostside.NewID()
	_, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), ID: id})
	if err == nil || !strings.Contains(err.Error(), "agent-is-broken") {
		t.Fatalf("Create with a broken agent: %v; want the agent's log in the error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v to notice the agent died", el)
	}
	if left := r.leftovers(id); len(left) > 0 {
		t.Fatalf("failed Create left %v", left)
	}
	t.Log(err)
}

func TestTaskDiesMidExec(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	s := sb.(*Sandbox)
	l, _ := s.life(t.Context())
	time.AfterFunc(300*time.Millisecond, func() { l.task.Kill(context.Background(), 9, client.WithKillAll) })
	_, err = sb.Exec(t.Context(), runner.Process{Args: []string{"sleep", "30"}})
	if !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("Exec in a killed task: %v, want ErrUnavailable", err)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("Close of a dead sandbox: %v", err)
	}
	if left := r.leftovers(sb.ID()); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	t.Log(err)
}

// TestReap: Reap removes what dead owners left (a running task of an
// unheld sandbox, a container of a dead process, a lone snapshot) and
// keeps a live owner's.
func TestReap(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	ctx := t.Context()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadProc := fmt.Sprintf("%d:1", dead.Process.Pid)
	img, err := r.image(ctx, DefaultImage)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(proc string) string {
		id := "reap-" + hostside.NewID()
		labels := map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: "other-" + hostside.NewID(), hostside.LabelSandbox: id, hostside.LabelOwnerProc: proc}
		_, err := r.c.NewContainer(ctx, id, client.WithSnapshotter(DefaultSnapshotter),
			client.WithNewSnapshotView(id, img, snapshots.WithLabels(labels)),
			client.WithContainerLabels(labels), client.WithSpec(&specs.Spec{Version: specs.Version, Root: &specs.Root{Path: "rootfs"}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.remove(context.Background(), id) })
		return id
	}
	deadID, liveID := mk(deadProc), mk(hostside.SelfProc())
	// A snapshot without a container (crash between the two).
	lone := "reap-lone-" + hostside.NewID()
	if _, err := r.c.SnapshotService(DefaultSnapshotter).View(ctx, lone, "", snapshots.WithLabels(map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: "x", hostside.LabelSandbox: lone, hostside.LabelOwnerProc: deadProc})); err != nil {
		t.Fatal(err)
	}
	// Our own sandbox, forgotten (as if Close had lost track of it).
	sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	r.host.Forget(sb.ID())
	n, err := r.Reap(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	for _, id := range []string{deadID, sb.ID()} {
		if _, err := r.c.ContainerService().Get(ctx, id); err == nil {
			t.Errorf("container %s survived Reap", id)
		}
	}
	if _, err := r.c.ContainerService().Get(ctx, liveID); err != nil {
		t.Errorf("container of a live owner was reaped: %v", err)
	}
	if _, err := r.c.SnapshotService(DefaultSnapshotter).Stat(ctx, lone); err == nil {
		t.Error("lone snapshot survived Reap")
	}
	if left := r.leftovers(sb.ID()); len(left) > 0 {
		t.Errorf("reaped sandbox left %v", left)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatalf("Close after reap: %v", err)
	}
}

// TestAgentLogBounded: code in the sandbox can write to the agent's
// stdout (same uid); the host keeps only a bounded tail, never a file.
func TestAgentLogBounded(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/sh", "-c", "head -c 20000000 /dev/zero > /proc/1/fd/1; echo rc=$?"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s%s", res.Stdout, res.Stderr)
	s := sb.(*Sandbox)
	var total int64
	filepath.Walk(s.dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	if total > 1<<20 {
		t.Errorf("state dir holds %d bytes of files", total)
	}
	l, _ := s.life(t.Context())
	if n := len(l.log.tail(0)); n > agentLogLimit+64 {
		t.Errorf("agent log keeps %d bytes", n)
	}
	mustEcho(t, sb)
}

func mustEcho(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"echo", "ok"}})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("echo: %v %+v", err, res)
	}
}

// TestReapReplica: a replica that took over a dead one's work reaps the
// dead one's sandboxes in the shared namespace (ReplicaReaper), by its
// replica label, whether the dead one's process lives or not, and no
// other replica's.
func TestReapReplica(t *testing.T) {
	dead := newTestRunner(t, Config{ReconcileInterval: -1}) // the replica that lost its lease
	taker := newTestRunner(t, Config{ReconcileInterval: -1})
	tok := hostside.NewID()
	mk := func(replica string) runner.Sandbox {
		sb, err := dead.Create(t.Context(), runner.SandboxSpec{Replica: replica, Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	}
	gone, kept := mk("rep-dead-"+tok), mk("rep-live-"+tok)
	n, err := taker.ReapReplica(t.Context(), "rep-dead-"+tok)
	if err != nil || n != 1 {
		t.Fatalf("ReapReplica = %d, %v; want 1", n, err)
	}
	if _, err := taker.c.ContainerService().Get(t.Context(), gone.ID()); err == nil {
		t.Fatal("the dead replica's container survived ReapReplica")
	}
	if res, err := kept.Exec(t.Context(), runner.Process{Args: []string{"/bin/echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("another replica's sandbox after the reap: %+v %v", res, err)
	}
	if n, err := taker.ReapReplica(t.Context(), "rep-dead-"+tok); err != nil || n != 0 {
		t.Fatalf("second ReapReplica = %d, %v; want 0", n, err)
	}
	if err := gone.Close(t.Context()); err != nil {
		t.Fatalf("Close after the reap: %v", err)
	}
	if left := dead.leftovers(gone.ID()); len(left) > 0 {
		t.Fatalf("left after the reap and Close: %v", left)
	}
}
