package kubernetes

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	runnertest.Run(t, runnertest.Factory{
		New:             func(t *testing.T) runner.Runner { return r },
		DropsPrivileges: true,
		KillsDaemons:    true,
		KnownLeaks: map[string]string{
			runnertest.LeakTmpfsInodes: "the kubelet mounts memory-backed emptyDirs (/tmp, /dev/shm) with a size only: Kubernetes has no inode limit, so their files are bounded by the pod's memory limit",
			runnertest.LeakNetDevice:   "the pod's eth0 carries the agent's TCP listener (sandboxd dials the pod IP); the code cannot use it: no inet, netlink or packet socket without the http effect (seccomp), no route out, and the NetworkPolicy denies all egress",
		},
		KnownGaps: map[string]string{
			"DiskLimits":      "an emptyDir's sizeLimit is enforced by the kubelet's eviction, not as ENOSPC, and Kubernetes has no inode limit: the workspace needs a volume with a filesystem quota",
			"AgentFiles":      "file operations through Agent() change the pod's copy of the workspace, which the runner copies back only after an Exec: deletions and new files do not reach the host",
			"AgentFilesOwned": "as AgentFiles: the ownership of files written through Agent() does not reach the host's copy of the workspace",
		},
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
