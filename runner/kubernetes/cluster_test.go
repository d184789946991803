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
	})
}
