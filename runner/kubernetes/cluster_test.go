package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// The real-cluster tests run when SANDBOXD_KUBECONFIG names a cluster's
// kubeconfig (the single-node cluster of the project's setup); with
// SANDBOXD_REQUIRE_KUBERNETES=1 a missing or unusable cluster fails them
// instead of skipping. SANDBOXD_KUBERNETES_IMAGE, _RUNTIME_CLASS and
// _SANDBOXD_CIDR configure the runner as sandboxd's keys do.

func clusterConfig(t testing.TB) Config {
	t.Helper()
	kc := os.Getenv("SANDBOXD_KUBECONFIG")
	fail := func(why string) {
		if os.Getenv("SANDBOXD_REQUIRE_KUBERNETES") != "" {
			t.Fatalf("SANDBOXD_REQUIRE_KUBERNETES is set but %s", why)
		}
		t.Skipf("%s (set SANDBOXD_KUBECONFIG; SANDBOXD_REQUIRE_KUBERNETES=1 to fail instead of skipping)", why)
	}
	if kc == "" {
		fail("no cluster: SANDBOXD_KUBECONFIG unset")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		fail("kubeconfig: " + err.Error())
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		fail("client: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		fail("cluster not answering: " + err.Error())
	}
	return Config{
		Kubeconfig: kc, Namespace: os.Getenv("SANDBOXD_KUBERNETES_NAMESPACE"), Image: os.Getenv("SANDBOXD_KUBERNETES_IMAGE"),
		RuntimeClass: os.Getenv("SANDBOXD_KUBERNETES_RUNTIME_CLASS"), SandboxdCIDR: os.Getenv("SANDBOXD_KUBERNETES_SANDBOXD_CIDR"),
		WorkspaceDriver:   os.Getenv("SANDBOXD_KUBERNETES_WORKSPACE_DRIVER"),
		ReconcileInterval: -1,
	}
}

func newCluster(t testing.TB) *Runner {
	t.Helper()
	cfg := clusterConfig(t)
	cfg.StateDir = t.TempDir()
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestConformance is runnertest against the real cluster.
func TestConformance(t *testing.T) {
	r := newCluster(t)
	gaps := map[string]string{
		"ForkLoopKilled": "sandboxd does not read the pod's cgroup from the host, and the agent's inside view (ServerOptions.CgroupUsage) does not watch pids.events yet: a fork loop runs to its timeout",
	}
	if r.cfg.WorkspaceDriver == "" {
		gaps["DiskLimits"] = "no workspace driver (SANDBOXD_KUBERNETES_WORKSPACE_DRIVER): an emptyDir's sizeLimit is enforced by the kubelet's eviction, not as ENOSPC, and Kubernetes has no inode limit"
	}
	runnertest.Run(t, runnertest.Factory{
		New:             func(t *testing.T) runner.Runner { return r },
		DropsPrivileges: true,
		KillsDaemons:    true,
		KnownLeaks: map[string]string{
			runnertest.LeakTmpfsInodes: "the kubelet mounts memory-backed emptyDirs (/tmp, /dev/shm) with a size only: Kubernetes has no inode limit, so their files are bounded by the pod's memory limit",
			runnertest.LeakNetDevice:   "the pod's eth0 carries the agent's TCP listener (sandboxd dials the pod IP); the code cannot use it: no inet, netlink or packet socket without the http effect (seccomp), no route out, and the NetworkPolicy denies all egress",
		},
		KnownGaps: gaps,
	})
}

// TestClusterReap: the pod and secret of an owner that died (its
// owner-proc names no live process, as after kill -9 of sandboxd) are
// removed by the next runner's Reap; nothing of a live owner's is.
func TestClusterReap(t *testing.T) {
	a := newCluster(t)
	ctx := t.Context()
	p := startTestPod(t, a, "reap", "")
	// A second runner sees a live owner's pod and keeps it.
	b := newCluster(t)
	if _, err := b.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.CoreV1().Pods(b.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("live owner's pod reaped: %v", err)
	}
	// The owner "dies": its owner-proc now names no process.
	pod, err := a.c.CoreV1().Pods(a.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[hostside.LabelOwnerProc] = "999999999:1"
	if _, err := a.c.CoreV1().Pods(a.cfg.Namespace).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := b.Reap(ctx)
	if err != nil || n < 1 {
		t.Fatalf("reaped %d, %v", n, err)
	}
	if _, err := b.c.CoreV1().Pods(b.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("dead owner's pod still there")
	}
	if _, err := b.c.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("dead owner's secret still there")
	}
}

// TestClusterReapReplica: the pod and secret of a sandbox another replica
// made (its sandboxd.replica label) are removed by ReapReplica of that
// replica though their owner lives (the replica lost its lease); another
// replica's, and the reaping runner's own open sandbox, stay.
func TestClusterReapReplica(t *testing.T) {
	a, b := newCluster(t), newCluster(t)
	ctx := t.Context()
	dead, other := startTestPod(t, a, "rdead", "r-dead"), startTestPod(t, a, "rother", "r-other")
	exists := func(name string) (pod, secret bool) {
		_, perr := b.c.CoreV1().Pods(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		_, serr := b.c.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		return perr == nil, serr == nil
	}
	n, err := b.ReapReplica(ctx, "r-dead")
	if err != nil || n != 1 {
		t.Fatalf("ReapReplica = %d, %v; want 1", n, err)
	}
	if p, s := exists(dead.Name); p || s {
		t.Errorf("the dead replica's sandbox: pod left %v, secret left %v", p, s)
	}
	if p, s := exists(other.Name); !p || !s {
		t.Errorf("another replica's sandbox removed: pod %v, secret %v", p, s)
	}
	// The reaping runner's own open sandbox of that replica stays.
	mine := startTestPod(t, b, "rmine", "r-dead")
	if n, err := b.ReapReplica(ctx, "r-dead"); err != nil || n != 0 {
		t.Fatalf("ReapReplica with its own sandbox open = %d, %v; want 0", n, err)
	}
	if p, _ := exists(mine.Name); !p {
		t.Error("the runner's own open sandbox was reaped")
	}
}

// TestClusterReapOwnerPods: sandboxd replicas in the cluster, each in a
// pod of its own (Config.OwnerPod), judge each other's sandboxes by the
// owner's pod, not by its process (which another pod's pid namespace
// cannot see). Runner b keeps runner a's sandbox while a's owner pod
// lives, though its owner-proc names no process; reaps one whose
// recorded owner pod has another uid; and reaps a's sandbox once a's
// owner pod is deleted, which a itself, holding it open, does not.
func TestClusterReapOwnerPods(t *testing.T) {
	cfg := clusterConfig(t)
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	ctx := t.Context()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	ownerA, ownerB := make(chan *corev1.Pod, 1), make(chan *corev1.Pod, 1)
	go func() { ownerA <- startOwnerPod(t, cs, ns, "owner-a-"+hex.EncodeToString(suffix), cfg.Image) }()
	go func() { ownerB <- startOwnerPod(t, cs, ns, "owner-b-"+hex.EncodeToString(suffix), cfg.Image) }()
	oa, ob := <-ownerA, <-ownerB
	if oa == nil || ob == nil {
		t.FailNow()
	}
	owned := func(o *corev1.Pod) *Runner {
		c := cfg
		c.StateDir = t.TempDir()
		// Two sandbox pods and two owner pods on the 2-core test node
		// (whole-CPU requests would leave one unschedulable).
		c.CPURequestPercent = 10
		c.OwnerPod = OwnerPod{Namespace: o.Namespace, Name: o.Name, UID: string(o.UID)}
		r, err := New(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	a, b := owned(oa), owned(ob)
	kept, other := startTestPod(t, a, "ownk", ""), startTestPod(t, a, "ownu", "")
	for _, name := range []string{kept.Name, other.Name} {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := a.cfg.OwnerPod.String(); pod.Annotations[LabelOwnerPod] != want || sec.Annotations[LabelOwnerPod] != want {
			t.Fatalf("%s: owner pod recorded %q (pod), %q (secret), want %q", name, pod.Annotations[LabelOwnerPod], sec.Annotations[LabelOwnerPod], want)
		}
	}
	annotate := func(name, key, value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) (pod, secret bool) {
		_, perr := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		_, serr := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		return perr == nil, serr == nil
	}
	// Seen from b's pid namespace a's process is dead: the pid rule
	// alone would reap both. a's owner pod lives: both stay.
	annotate(kept.Name, hostside.LabelOwnerProc, "999999999:1")
	annotate(other.Name, hostside.LabelOwnerProc, "999999999:1")
	if _, err := b.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{kept.Name, other.Name} {
		if p, s := exists(name); !p || !s {
			t.Fatalf("%s of a live owner pod reaped: pod left %v, secret left %v", name, p, s)
		}
	}
	// An owner pod of that name but another uid (made anew): an orphan.
	annotate(other.Name, LabelOwnerPod, OwnerPod{Namespace: oa.Namespace, Name: oa.Name, UID: "00000000-0000-0000-0000-000000000000"}.String())
	if n, err := b.Reap(ctx); err != nil || n < 1 {
		t.Fatalf("Reap after the uid changed = %d, %v", n, err)
	}
	if p, s := exists(other.Name); p || s {
		t.Fatalf("sandbox of an owner pod with another uid: pod left %v, secret left %v", p, s)
	}
	if p, s := exists(kept.Name); !p || !s {
		t.Fatalf("sandbox of a live owner pod reaped: pod left %v, secret left %v", p, s)
	}
	// a's owner pod goes (its container exits on SIGTERM). a holds its
	// sandbox open and keeps it; b reaps it once the pod is terminated
	// or gone.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, oa.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if p, s := exists(kept.Name); !p || !s {
		t.Fatalf("a reaped its own open sandbox: pod left %v, secret left %v", p, s)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := b.Reap(ctx); err != nil {
			return false, err
		}
		p, s := exists(kept.Name)
		return !p && !s, nil
	})
	if err != nil {
		o, gerr := cs.CoreV1().Pods(ns).Get(ctx, oa.Name, metav1.GetOptions{})
		t.Fatalf("sandbox of a deleted owner pod not reaped: %v (owner pod: %v, %+v)", err, gerr, o.Status)
	}
	if o, err := cs.CoreV1().Pods(ns).Get(ctx, oa.Name, metav1.GetOptions{}); err == nil {
		t.Logf("reaped while the owner pod was being deleted: phase %s, live %v", o.Status.Phase, podLive(o))
	} else {
		t.Logf("reaped once the owner pod was gone (%v)", err)
	}
	// b's own owner pod and the sandbox pods of other tests are untouched
	// (b's Reap judged them by their own rules).
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, ob.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("b's owner pod: %v", err)
	}
}

// startOwnerPod starts pod name in ns, standing for a sandboxd pod: the
// sandbox image running a process that exits on SIGTERM, without the
// sandboxes' labels or sandboxd's (the NetworkPolicy admits neither
// to anything), deleted at the end of the test. It returns nil after a
// t.Error when the pod does not run.
func startOwnerPod(t *testing.T, cs kubernetes.Interface, ns, name, image string) *corev1.Pod {
	if image == "" {
		image = DefaultImage
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "sandboxd-owner-test"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(5)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65534)), RunAsGroup: ptr(int64(65534)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "owner", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"python3", "-c", "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True: time.sleep(60)"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}},
		},
	}
	created, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create owner pod %s: %v", name, err)
		return nil
	}
	t.Cleanup(func() {
		cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	last := created
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Errorf("owner pod %s not running: %v (status %+v)", name, err, last.Status)
		return nil
	}
	if last.UID != created.UID {
		t.Errorf("owner pod %s: uid %s, created as %s", name, last.UID, created.UID)
		return nil
	}
	return last
}

// startTestPod starts a sandbox pod of r (ID prefix plus r's instance,
// made by replica, "" for none), deleted at the end of the test.
func startTestPod(t *testing.T, r *Runner, prefix, replica string) *Pod {
	t.Helper()
	spec := runner.SandboxSpec{ID: prefix + r.in.ID[:8], Replica: replica, Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)}
	limits, err := r.in.Reserve(t.Context(), &spec, r.cfg.Defaults)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.StartPod(t.Context(), spec, limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Delete(context.Background()) })
	return p
}
