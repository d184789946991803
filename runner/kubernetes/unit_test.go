package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// fakeCluster is the fake clientset with a "kubelet": a created pod is
// running at 127.0.0.1 at once, and its secret's token starts an agent
// there (file operations in a temp dir, processes as the test's user).
func fakeCluster(t *testing.T) (*fake.Clientset, int) {
	cs, port, _ := fakeClusterProxy(t)
	return cs, port
}

// fakeClusterProxy also gives the address of the "pod's" egress proxy
// (what the code would reach at 127.0.0.1:3128), once a secret exists.
func fakeClusterProxy(t *testing.T) (*fake.Clientset, int, chan string) {
	t.Helper()
	var port int
	for {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = raw.Addr().(*net.TCPAddr).Port
		raw.Close()
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1)); err == nil {
			l.Close()
			break
		}
	}
	proxy := make(chan string, 1)
	cs := fake.NewClientset()
	cs.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sec := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return true, nil, err
		}
		tl, err := agent.TokenListener(l, sec.Data[tokenKey])
		if err != nil {
			return true, nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		root := t.TempDir() // the pod's workspace emptyDir
		go func() {
			agent.Serve(ctx, tl, agent.ServerOptions{Root: root})
			if ctx.Err() != nil {
				return
			}
			// A client shut the agent down: the workspace fill init
			// container is done, the sandbox container starts (with the
			// same emptyDir; the fake cannot mount it read-only).
			pod, err := cs.CoreV1().Pods(sec.Namespace).Get(ctx, sec.Name, metav1.GetOptions{})
			if err != nil || len(pod.Spec.InitContainers) == 0 {
				t.Errorf("agent shut down in pod %s (%v): only a fill container's may be", sec.Name, err)
				return
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Error(err)
				return
			}
			tl, _ := agent.TokenListener(l, sec.Data[tokenKey])
			go agent.Serve(ctx, tl, agent.ServerOptions{Root: root})
			pod.Status.Phase = corev1.PodRunning
			pod.Status.InitContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
			if _, err := cs.CoreV1().Pods(sec.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}()
		rl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		if err != nil {
			return true, nil, err
		}
		rtl, _ := agent.TokenListener(rl, sec.Data[tokenKey])
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return true, nil, err
		}
		go agent.ForwardEgressTo(ctx, pl, agent.NewReverseEgress(ctx, rtl).Take, nil)
		select {
		case proxy <- pl.Addr().String():
		default:
		}
		return false, nil, nil
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "127.0.0.1"
		if len(p.Spec.InitContainers) > 0 { // running the first, until its agent is shut down
			p.Status.Phase = corev1.PodPending
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.InitContainers[0].Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}
		return false, nil, nil
	})
	return cs, port, proxy
}

func newFake(t *testing.T, cs *fake.Clientset, port int, mod func(*Config)) *Runner {
	t.Helper()
	cfg := Config{Client: cs, AgentPort: port, StateDir: t.TempDir(), ReconcileInterval: -1, Namespace: "sb"}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestFakeLifecycle: Create makes a Secret and a Pod, reaches the agent
// over the token channel, Close removes both.
func TestFakeLifecycle(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Labels: map[string]string{"job": "j1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := sb.(runner.AgentSandbox).Agent().Ping(ctx); err != nil {
		t.Fatal(err)
	}
	name := podName(sb.ID())
	pod, err := cs.CoreV1().Pods("sb").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[hostside.LabelOwner] != r.in.ID || pod.Labels["job"] != "j1" || pod.Labels[hostside.LabelSandbox] != sb.ID() {
		t.Fatalf("labels %v", pod.Labels)
	}
	if pod.Annotations[hostside.LabelOwnerProc] != hostside.SelfProc() {
		t.Fatalf("annotations %v", pod.Annotations)
	}
	if _, err := cs.CoreV1().Secrets("sb").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if np, err := cs.NetworkingV1().NetworkPolicies("sb").Get(ctx, PolicyName, metav1.GetOptions{}); err != nil || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Fatalf("network policy %+v, %v", np, err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("sb").Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("pod left after Close")
	}
	if _, err := cs.CoreV1().Secrets("sb").Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("secret left after Close")
	}
}

// TestFakeRefuses: a spec without isolation is refused.
func TestFakeRefuses(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	if _, err := r.Create(t.Context(), runner.SandboxSpec{}); !errors.Is(err, runner.ErrInvalidSpec) {
		t.Fatalf("no isolation: %v", err)
	}
}

// echoEgress answers every connection with "seen:" and what it sent.
type echoEgress struct{}

func (echoEgress) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			b := make([]byte, 5)
			io.ReadFull(c, b)
			c.Write(append([]byte("seen:"), b...))
		}()
	}
}

// TestFakeEgress: the code's proxy connections reach the sandbox's
// Egress over the reverse connections sandboxd opened, several at once.
func TestFakeEgress(t *testing.T) {
	cs, port, proxy := fakeClusterProxy(t)
	r := newFake(t, cs, port, nil)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: echoEgress{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	addr := <-proxy
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := fmt.Sprintf("conn%d", i)
			c.Write([]byte(msg))
			b := make([]byte, 10)
			if _, err := io.ReadFull(c, b); err != nil || string(b) != "seen:"+msg {
				errs <- fmt.Errorf("got %q, %v", b, err)
				return
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestFakeReap: pods and secrets of a dead owner, and this instance's
// unheld ones, are deleted; a live owner's stay.
func TestFakeReap(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	ctx := t.Context()
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	mk := func(name, owner, proc string) {
		meta := metav1.ObjectMeta{Name: name, Namespace: "sb", CreationTimestamp: old,
			Labels:      map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: owner, hostside.LabelSandbox: name},
			Annotations: map[string]string{hostside.LabelOwnerProc: proc}}
		cs.Tracker().Add(&corev1.Pod{ObjectMeta: meta})
		cs.Tracker().Add(&corev1.Secret{ObjectMeta: meta})
	}
	mk("dead", "other", "999999999:1")        // no such pid
	mk("live", "other2", hostside.SelfProc()) // this process: alive
	mk("mine", r.in.ID, hostside.SelfProc())  // this instance's, not held
	n, err := r.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("reaped %d, want 2", n)
	}
	pods, _ := cs.CoreV1().Pods("sb").List(ctx, metav1.ListOptions{})
	secs, _ := cs.CoreV1().Secrets("sb").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "live" || len(secs.Items) != 1 {
		t.Fatalf("left pods %v secrets %d", pods.Items, len(secs.Items))
	}
}

// TestBuildPod: the isolation as the Pod carries it.
func TestBuildPod(t *testing.T) {
	iso := runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)
	name, _, err := ProfileName("sandboxd", agentProfile(iso.Seccomp))
	if err != nil {
		t.Fatal(err)
	}
	lim := hostside.MergeLimits(runner.Limits{DiskBytes: 64 << 20}, hostside.DefaultLimits)
	p := buildPod(podInput{Name: "sandbox-x", Namespace: "sb", Spec: runner.SandboxSpec{Isolation: iso}, Limits: lim,
		Image: "img", AgentBinary: hostside.AgentBinary, AgentPort: 7777, RuntimeClass: "gvisor",
		Seccomp: corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}, TmpBytes: 64 << 20})
	s := p.Spec
	if *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.HostNetwork || s.HostPID || s.HostIPC || *s.RuntimeClassName != "gvisor" {
		t.Fatalf("pod spec %+v", s)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			t.Fatalf("host path volume %s", v.Name)
		}
		if v.Name == "workspace" && v.EmptyDir.SizeLimit.Value() != 64<<20 {
			t.Fatalf("workspace size %v", v.EmptyDir.SizeLimit)
		}
		if v.Name == "token" && *v.Secret.DefaultMode != 0o400 {
			t.Fatalf("token mode %o", *v.Secret.DefaultMode)
		}
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || *sc.Privileged || *sc.RunAsUser != 0 ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != len(hostside.AgentCapabilities()) {
		t.Fatalf("security context %+v", sc)
	}
	if sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *sc.SeccompProfile.LocalhostProfile != name {
		t.Fatalf("seccomp %+v", sc.SeccompProfile)
	}
	if c.Resources.Limits.Memory().Value() != lim.MemoryBytes || c.Resources.Limits.Cpu().MilliValue() != lim.CPUMillis || c.Resources.Limits.StorageEphemeral().Value() == 0 {
		t.Fatalf("limits %v", c.Resources.Limits)
	}
	if !slicesContains(c.Command, "65534") || !slicesContains(c.Command, "--listen-tcp") || !slicesContains(c.Command, "--code-seccomp") {
		t.Fatalf("command %v", c.Command)
	}
	profiles, err := SeccompProfiles("sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := profiles[name]; !ok {
		t.Fatalf("profile %s not among the installed %d", name, len(profiles))
	}
}

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestFakeWorkspaceSync: a read-write workspace is copied in at Create
// and back after an Exec's file changes (here through the agent's
// write_file, the fake's pod has no process isolation).
func TestFakeWorkspaceSync(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o644)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	cl := sb.(runner.AgentSandbox).Agent()
	if b, err := cl.ReadFile(t.Context(), "in.txt", 0); err != nil || string(b) != "from host" {
		t.Fatalf("in pod: %q %v", b, err)
	}
	if err := cl.WriteFile(t.Context(), "sub/out.txt", []byte("from pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "out.txt")); err != nil || string(b) != "from pod" {
		t.Fatalf("host sees %q %v", b, err)
	}
}

// TestSeccompSplit: the pod's (the agent's) profile adds only the inet
// socket families to the policy's; the code keeps the policy's own, as
// the raw filter the Secret carries; the policy's value is not changed.
func TestSeccompSplit(t *testing.T) {
	for _, nw := range []runner.NetworkMode{runner.NetworkNone, runner.NetworkEgress} {
		iso := runnertest.Isolation(runner.WorkspaceReadWrite, nw)
		before := len(iso.Seccomp.Syscalls)
		a := agentProfile(iso.Seccomp)
		if !allowsFamily(a, unix.AF_INET) || !allowsFamily(a, unix.AF_INET6) || allowsFamily(a, unix.AF_PACKET) {
			t.Fatalf("%s: agent profile families", nw)
		}
		if len(iso.Seccomp.Syscalls) != before || allowsFamily(iso.Seccomp, unix.AF_INET) != (nw == runner.NetworkEgress) {
			t.Fatalf("%s: the policy's profile changed or is not as expected", nw)
		}
		if nw == runner.NetworkEgress && len(a.Syscalls) != before {
			t.Fatalf("egress: agent profile added %d rules to one that allows inet", len(a.Syscalls)-before)
		}
		f, err := codeFilter(iso.Seccomp)
		if err != nil || len(f) == 0 || len(f)%8 != 0 {
			t.Fatalf("%s: code filter of %d bytes, %v", nw, len(f), err)
		}
		sec := buildSecret("s", "ns", nil, []byte("t"), f)
		if string(sec.Data[filterKey]) != string(f) {
			t.Fatalf("%s: secret lacks the filter", nw)
		}
	}
}

// TestFakeReadOnlyWorkspace: the file_read row. The host workspace is
// copied into the emptyDir by the init container's agent, which is then
// shut down (the init container succeeds); the sandbox container, the
// only one that runs code, mounts that emptyDir read-only and nothing
// else of it, and what changes in the pod is never copied back.
func TestFakeReadOnlyWorkspace(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "in.txt"), []byte("from host"), 0o644)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkEgress), Egress: echoEgress{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	ctx := t.Context()
	pod, err := cs.CoreV1().Pods("sb").Get(ctx, podName(sb.ID()), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.InitContainerStatuses) != 1 || pod.Status.InitContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod status %+v: the fill agent was not shut down before the sandbox container started", pod.Status)
	}
	checkReadOnlyPod(t, pod)
	cl := sb.(runner.AgentSandbox).Agent()
	if b, err := cl.ReadFile(ctx, "sub/in.txt", 0); err != nil || string(b) != "from host" {
		t.Fatalf("in pod: %q %v", b, err)
	}
	// The fake's emptyDir is writable; a real one is not (EROFS): even
	// so nothing comes back to the host.
	if err := cl.WriteFile(ctx, "new.txt", []byte("from pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, runner.Process{Args: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only sandbox's file reached the host workspace: %v", err)
	}
}

// checkReadOnlyPod: the sandbox container mounts the workspace
// read-only, once; the init container (no egress, no code) mounts it
// writable, with the sandbox container's isolation.
func checkReadOnlyPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("containers: init %d, main %d", len(pod.Spec.InitContainers), len(pod.Spec.Containers))
	}
	main, fill := pod.Spec.Containers[0], pod.Spec.InitContainers[0]
	var mainWS, fillWS []corev1.VolumeMount
	for _, m := range main.VolumeMounts {
		if m.Name == "workspace" {
			mainWS = append(mainWS, m)
		}
	}
	for _, m := range fill.VolumeMounts {
		if m.Name == "workspace" {
			fillWS = append(fillWS, m)
		}
	}
	if len(mainWS) != 1 || !mainWS[0].ReadOnly || mainWS[0].MountPath != runner.WorkspaceDir {
		t.Fatalf("sandbox container's workspace mounts %+v, want one, read-only, at %s", mainWS, runner.WorkspaceDir)
	}
	if len(fillWS) != 1 || fillWS[0].ReadOnly {
		t.Fatalf("fill container's workspace mounts %+v, want one writable", fillWS)
	}
	if slicesContains(fill.Command, "--egress-listen") || !slicesContains(main.Command, "--egress-listen") {
		t.Fatalf("egress flags: fill %v, main %v", fill.Command, main.Command)
	}
	if fmt.Sprint(fill.SecurityContext) != fmt.Sprint(main.SecurityContext) || fmt.Sprint(fill.Resources) != fmt.Sprint(main.Resources) || fill.Image != main.Image {
		t.Fatalf("fill container's isolation differs:\n%+v\n%+v", fill, main)
	}
}

// TestBuildPodWorkspaceModes: no init container and a writable mount for
// a read-write workspace, no workspace volume for none, the fill init
// container and a read-only mount for read-only.
// TestBuildPodCPURequest: the pod requests CPURequestPercent of its CPU
// limit (Burstable), its memory whole; the default requests all of it
// (Guaranteed). Config refuses a share outside 1-100.
func TestBuildPodCPURequest(t *testing.T) {
	lim := hostside.MergeLimits(runner.Limits{CPUMillis: 1000}, hostside.DefaultLimits)
	for _, tc := range []struct {
		percent int
		want    int64
	}{{0, 1000}, {100, 1000}, {25, 250}, {1, 10}} {
		p := buildPod(podInput{Name: "sandbox-x", Namespace: "sb", Spec: runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)},
			Limits: lim, Image: "img", AgentBinary: hostside.AgentBinary, AgentPort: 7777, TmpBytes: 64 << 20, CPURequestPercent: tc.percent})
		r := p.Spec.Containers[0].Resources
		if got := r.Requests.Cpu().MilliValue(); got != tc.want || r.Limits.Cpu().MilliValue() != 1000 {
			t.Errorf("percent %d: cpu request %dm limit %v, want %dm and 1000m", tc.percent, got, r.Limits.Cpu(), tc.want)
		}
		if !r.Requests.Memory().Equal(*r.Limits.Memory()) {
			t.Errorf("percent %d: memory request %v != limit %v", tc.percent, r.Requests.Memory(), r.Limits.Memory())
		}
	}
	for _, bad := range []int{-1, 101} {
		c := Config{CPURequestPercent: bad}
		if err := c.setDefaults(); err == nil {
			t.Errorf("cpu request percent %d accepted", bad)
		}
	}
}

func TestBuildPodWorkspaceModes(t *testing.T) {
	lim := hostside.MergeLimits(runner.Limits{DiskBytes: 64 << 20}, hostside.DefaultLimits)
	build := func(mode runner.WorkspaceMode) *corev1.Pod {
		return buildPod(podInput{Name: "sandbox-x", Namespace: "sb", Spec: runner.SandboxSpec{Isolation: runnertest.Isolation(mode, runner.NetworkEgress)},
			Limits: lim, Image: "img", AgentBinary: hostside.AgentBinary, AgentPort: 7777, Seccomp: corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}})
	}
	checkReadOnlyPod(t, build(runner.WorkspaceReadOnly))
	rw := build(runner.WorkspaceReadWrite)
	if len(rw.Spec.InitContainers) != 0 {
		t.Fatalf("read-write: init containers %v", rw.Spec.InitContainers)
	}
	for _, m := range rw.Spec.Containers[0].VolumeMounts {
		if m.Name == "workspace" && m.ReadOnly {
			t.Fatal("read-write workspace mounted read-only")
		}
	}
	none := build(runner.WorkspaceNone)
	for _, v := range none.Spec.Volumes {
		if v.Name == "workspace" {
			t.Fatal("a workspace volume without a workspace")
		}
	}
	if len(none.Spec.InitContainers) != 0 {
		t.Fatalf("none: init containers %v", none.Spec.InitContainers)
	}
}

// TestBuildPodWorkspaceDriver: with a workspace driver the workspace is
// its CSI inline volume of the job's disk_bytes and disk_inodes (the
// workspace defaults where zero), and the pod's ephemeral-storage no
// longer counts it; the read-only mode's fill container shares it.
func TestBuildPodWorkspaceDriver(t *testing.T) {
	build := func(l runner.Limits, mode runner.WorkspaceMode, driver string) *corev1.Pod {
		return buildPod(podInput{Name: "sandbox-x", Namespace: "sb", Spec: runner.SandboxSpec{Isolation: runnertest.Isolation(mode, runner.NetworkEgress)},
			Limits: hostside.MergeLimits(l, hostside.DefaultLimits), Image: "img", AgentBinary: hostside.AgentBinary, AgentPort: 7777,
			Seccomp: corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, WorkspaceDriver: driver})
	}
	volume := func(p *corev1.Pod) corev1.Volume {
		for _, v := range p.Spec.Volumes {
			if v.Name == "workspace" {
				return v
			}
		}
		t.Fatal("no workspace volume")
		return corev1.Volume{}
	}
	p := build(runner.Limits{DiskBytes: 32 << 20, DiskInodes: 512}, runner.WorkspaceReadWrite, wsvol.DefaultDriver)
	v := volume(p)
	if v.CSI == nil || v.EmptyDir != nil || v.CSI.Driver != wsvol.DefaultDriver {
		t.Fatalf("workspace volume %+v", v.VolumeSource)
	}
	if got, err := wsvol.Parse(v.CSI.VolumeAttributes, 0); err != nil || got != (workspace.Limits{Bytes: 32 << 20, Inodes: 512}) {
		t.Fatalf("volume attributes %v: %+v, %v", v.CSI.VolumeAttributes, got, err)
	}
	plain := build(runner.Limits{DiskBytes: 32 << 20, DiskInodes: 512}, runner.WorkspaceReadWrite, "")
	if e, pe := p.Spec.Containers[0].Resources.Limits.StorageEphemeral().Value(), plain.Spec.Containers[0].Resources.Limits.StorageEphemeral().Value(); pe-e != 32<<20 {
		t.Fatalf("ephemeral-storage with the driver %d, with an emptyDir %d: want the workspace's 32 MiB less", e, pe)
	}
	if v := volume(plain); v.EmptyDir == nil || v.EmptyDir.SizeLimit.Value() != 32<<20 {
		t.Fatalf("without a driver: %+v", v.VolumeSource)
	}
	def := volume(build(runner.Limits{}, runner.WorkspaceReadWrite, "w.example"))
	if got, err := wsvol.Parse(def.CSI.VolumeAttributes, 0); err != nil || got != (workspace.Limits{}).Effective() || def.CSI.Driver != "w.example" {
		t.Fatalf("default limits: %+v %v, %v", def.CSI, got, err)
	}
	ro := build(runner.Limits{DiskBytes: 32 << 20}, runner.WorkspaceReadOnly, wsvol.DefaultDriver)
	checkReadOnlyPod(t, ro)
	if volume(ro).CSI == nil {
		t.Fatal("read-only: no CSI workspace")
	}
}

// TestFakeWorkspaceMirror: the mirror's three-way cases without a
// cluster: a path that changes kind on either side (file to directory,
// directory to file), a deletion of a whole tree on either side, and a
// file changed only on one side kept through the other's sync.
func TestFakeWorkspaceMirror(t *testing.T) {
	cs, port := fakeCluster(t)
	r := newFake(t, cs, port, nil)
	ws := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, "tree", "a"), 0o755))
	must(os.WriteFile(filepath.Join(ws, "tree", "a", "f"), []byte("1"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "x"), []byte("file"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "host-only"), []byte("h0"), 0o644))
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Workspace: ws, Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	must(err)
	defer sb.Close(context.Background())
	k := sb.(*Sandbox)
	cl := k.Agent()
	ctx := t.Context()
	must(k.PullWorkspace(ctx)) // the base learns the pod's mtimes and directories

	// In the pod: x becomes a directory, tree goes.
	must(cl.Remove(ctx, "x", false))
	must(cl.WriteFile(ctx, "x/inner", []byte("in"), 0o644))
	must(cl.Remove(ctx, "tree", true))
	// On the host meanwhile: host-only changes.
	must(os.WriteFile(filepath.Join(ws, "host-only"), []byte("h1"), 0o644))
	must(k.PullWorkspace(ctx))
	if b, err := os.ReadFile(filepath.Join(ws, "x", "inner")); err != nil || string(b) != "in" {
		t.Errorf("host x/inner: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "tree")); !os.IsNotExist(err) {
		t.Errorf("host tree/ after the pod removed it: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "host-only")); string(b) != "h1" {
		t.Errorf("a pull overwrote the host's own change: %q", b)
	}
	must(k.PushWorkspace(ctx))
	if b, err := cl.ReadFile(ctx, "host-only", 0); err != nil || string(b) != "h1" {
		t.Errorf("pod host-only after a push: %q, %v", b, err)
	}

	// On the host: x becomes a file again, and a new tree appears.
	must(os.RemoveAll(filepath.Join(ws, "x")))
	must(os.WriteFile(filepath.Join(ws, "x"), []byte("file again"), 0o600))
	must(os.MkdirAll(filepath.Join(ws, "new", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(ws, "new", "deep", "g"), []byte("g"), 0o644))
	must(k.PushWorkspace(ctx))
	if b, err := cl.ReadFile(ctx, "x", 0); err != nil || string(b) != "file again" {
		t.Errorf("pod x after the host made it a file: %q, %v", b, err)
	}
	if fi, err := cl.Stat(ctx, "x"); err != nil || fi.Mode.Perm() != 0o600 {
		t.Errorf("pod x mode: %+v, %v", fi, err)
	}
	if b, err := cl.ReadFile(ctx, "new/deep/g", 0); err != nil || string(b) != "g" {
		t.Errorf("pod new/deep/g: %q, %v", b, err)
	}
	// A pull now changes nothing on the host, and the host's removal of
	// a whole tree reaches the pod.
	must(k.PullWorkspace(ctx))
	must(os.RemoveAll(filepath.Join(ws, "new")))
	must(k.PushWorkspace(ctx))
	if _, err := cl.Stat(ctx, "new"); err == nil {
		t.Error("pod new/ after the host removed it")
	}
	must(k.PullWorkspace(ctx))
	if _, err := os.Stat(filepath.Join(ws, "new")); !os.IsNotExist(err) {
		t.Errorf("host new/ came back: %v", err)
	}
}

// TestMirrorGone: what left both sides is listed parents first and
// without what lies below a listed directory, also when a sibling sorts
// between a directory and its children ("a-b" between "a" and "a/x").
func TestMirrorGone(t *testing.T) {
	m := newMirror(t.TempDir())
	for _, p := range []string{"a", "a/x", "a/x/y", "a-b", "a-b/z", "keep", "keep/k", "c"} {
		m.base[p] = synced{}
	}
	got := m.gone(map[string]bool{"keep": true, "keep/k": true})
	if want := []string{"a", "a-b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("gone = %v, want %v", got, want)
	}
}
