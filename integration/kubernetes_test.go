//go:build integration

package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestKubernetesRunner: sandboxd serving on the Kubernetes runner
// (runner.name: kubernetes) against the cluster of SANDBOXD_KUBECONFIG
// (scripts/k8s-setup.sh; SANDBOXD_KUBERNETES_NAMESPACE, _IMAGE and
// _SANDBOXD_CIDR as it prints them): a one-shot python_repl job and a
// session whose second call sees the first's state. Skipped without
// SANDBOXD_KUBECONFIG; SANDBOXD_REQUIRE_KUBERNETES=1 fails instead.
func TestKubernetesRunner(t *testing.T) {
	kc := os.Getenv("SANDBOXD_KUBECONFIG")
	if kc == "" {
		if os.Getenv("SANDBOXD_REQUIRE_KUBERNETES") != "" {
			t.Fatal("SANDBOXD_REQUIRE_KUBERNETES is set but SANDBOXD_KUBECONFIG is not (run scripts/k8s-setup.sh and source its env)")
		}
		t.Skip("no cluster: SANDBOXD_KUBECONFIG unset (scripts/k8s-setup.sh)")
	}
	// No pool: each sandbox pod requests its whole CPU limit, and the
	// test node has 2 cores (pooled pods would leave none to schedule on).
	conf := fmt.Sprintf("pool:\n  size: 0\nrunner:\n  name: kubernetes\n  kubernetes:\n    kubeconfig: %q\n", kc)
	for key, env := range map[string]string{"namespace": "SANDBOXD_KUBERNETES_NAMESPACE", "image": "SANDBOXD_KUBERNETES_IMAGE",
		"sandboxd_cidr": "SANDBOXD_KUBERNETES_SANDBOXD_CIDR", "runtime_class": "SANDBOXD_KUBERNETES_RUNTIME_CLASS"} {
		if v := os.Getenv(env); v != "" {
			conf += fmt.Sprintf("    %s: %q\n", key, v)
		}
	}
	s := startServer(t, conf)

	var j struct {
		State  string
		Runner string
		Result struct {
			OK      bool
			Content string
		}
	}
	resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{
		"tool": "python_repl", "arguments": map[string]any{"code": "print(6 * 7)"},
	}, &j)
	if resp.StatusCode != 200 || j.State != "succeeded" || !j.Result.OK || !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("one-shot job: %d %s", resp.StatusCode, data)
	}
	if j.Runner != "kubernetes" {
		t.Fatalf("job ran on %q, want kubernetes", j.Runner)
	}

	var ses struct {
		ID string `json:"id"`
	}
	resp, data = s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses)
	if resp.StatusCode != 201 || ses.ID == "" {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	for _, c := range []struct{ code, want string }{{"acc = 20", ""}, {"print(acc + 1)", "21"}} {
		resp, data = s.do("POST", "/v1/jobs?wait=true", "", map[string]any{
			"tool": "python_repl", "arguments": map[string]any{"code": c.code}, "session_id": ses.ID,
		}, &j)
		if resp.StatusCode != 200 || !j.Result.OK || !strings.Contains(j.Result.Content, c.want) {
			t.Fatalf("session call %q: %d %s", c.code, resp.StatusCode, data)
		}
	}
	if resp, _ = s.do("DELETE", "/v1/sessions/"+ses.ID, "", nil, nil); resp.StatusCode >= 300 {
		t.Fatalf("delete session: %d", resp.StatusCode)
	}
}
