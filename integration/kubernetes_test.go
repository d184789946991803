//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubernetesConfig is sandboxd's configuration for the cluster of
// SANDBOXD_KUBECONFIG (the runner's keys from the env k8s-setup.sh
// prints; the server gets no env of the test's), with no pool: each
// sandbox pod requests its whole CPU limit, and the test node has 2
// cores (pooled pods would leave none to schedule on). Skips without a
// cluster; SANDBOXD_REQUIRE_KUBERNETES=1 fails instead.
func kubernetesConfig(t *testing.T) string {
	t.Helper()
	kc := os.Getenv("SANDBOXD_KUBECONFIG")
	if kc == "" {
		if os.Getenv("SANDBOXD_REQUIRE_KUBERNETES") != "" {
			t.Fatal("SANDBOXD_REQUIRE_KUBERNETES is set but SANDBOXD_KUBECONFIG is not (run scripts/k8s-setup.sh and source its env)")
		}
		t.Skip("no cluster: SANDBOXD_KUBECONFIG unset (scripts/k8s-setup.sh)")
	}
	conf := fmt.Sprintf("pool:\n  size: 0\nrunner:\n  name: kubernetes\n  kubernetes:\n    kubeconfig: %q\n", kc)
	for _, kv := range [][2]string{{"namespace", "SANDBOXD_KUBERNETES_NAMESPACE"}, {"image", "SANDBOXD_KUBERNETES_IMAGE"},
		{"sandboxd_cidr", "SANDBOXD_KUBERNETES_SANDBOXD_CIDR"}, {"runtime_class", "SANDBOXD_KUBERNETES_RUNTIME_CLASS"},
		{"workspace_driver", "SANDBOXD_KUBERNETES_WORKSPACE_DRIVER"}} {
		if v := os.Getenv(kv[1]); v != "" {
			conf += fmt.Sprintf("    %s: %q\n", kv[0], v)
		}
	}
	return conf
}

// TestKubernetesKill9: sandboxd on the Kubernetes runner is killed with
// SIGKILL while a session's pod runs; the pod outlives it (with its
// owner record naming the dead process), and the next sandboxd on the
// same data dir reaps it at start. Pods are told apart by that owner
// record (pid and start time), so other tests' pods are never counted.
func TestKubernetesKill9(t *testing.T) {
	conf := kubernetesConfig(t)
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SANDBOXD_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ns := os.Getenv("SANDBOXD_KUBERNETES_NAMESPACE")
	if ns == "" {
		ns = "sandboxd"
	}
	s := startServer(t, conf)
	owned := func(pid int) []string {
		t.Helper()
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods.Items {
			if proc := p.Annotations["sandboxd.owner-proc"]; strings.HasPrefix(proc, strconv.Itoa(pid)+":") && p.DeletionTimestamp == nil {
				out = append(out, p.Name)
			}
		}
		return out
	}
	var ses struct {
		ID string `json:"id"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	if j := s.runIn(ses.ID, "python_repl", map[string]any{"code": "print('up')"}); !j.Result.OK {
		t.Fatalf("session call: %+v", j.Result)
	}
	pid := s.cmd.Process.Pid
	pods := owned(pid)
	if len(pods) != 1 {
		t.Fatalf("pods owned by sandboxd (pid %d): %v, want the session's one", pid, pods)
	}
	s.stop(syscall.SIGKILL)
	if left := owned(pid); len(left) != 1 {
		t.Fatalf("after the kill: %v, want the session's pod still there (the test proves nothing)", left)
	}
	s.start()
	deadline := time.Now().Add(60 * time.Second)
	for len(owned(pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if left := owned(pid); len(left) > 0 {
		t.Fatalf("the killed sandboxd's pods %v still there 60 s after the next start", left)
	}
}

// TestKubernetesRunner: sandboxd serving on the Kubernetes runner
// (runner.name: kubernetes) against the cluster of SANDBOXD_KUBECONFIG
// (scripts/k8s-setup.sh; SANDBOXD_KUBERNETES_NAMESPACE, _IMAGE and
// _SANDBOXD_CIDR as it prints them): a one-shot python_repl job and a
// session whose second call sees the first's state, an upload the REPL
// reads and files the REPL writes and removes, through the files API. Skipped without
// SANDBOXD_KUBECONFIG; SANDBOXD_REQUIRE_KUBERNETES=1 fails instead.
func TestKubernetesRunner(t *testing.T) {
	conf := kubernetesConfig(t)
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
	// Files: the pod's workspace is a copy of the host's, kept in step
	// around each call (runner.WorkspaceSyncer): an upload after the
	// session started reaches the REPL, and what the REPL writes and
	// removes reaches the files API.
	if code, data := s.raw("PUT", "/v1/sessions/"+ses.ID+"/files/in/data.txt", []byte("41"), "application/octet-stream"); code != 200 {
		t.Fatalf("upload: %d %s", code, data)
	}
	if j := s.runIn(ses.ID, "python_repl", map[string]any{"code": "import os\nprint(int(open('in/data.txt').read()) + 1)\nopen('out.txt', 'w').write('from the repl')\nos.remove('in/data.txt')"}); !j.Result.OK || !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("the REPL did not read the upload: %+v", j.Result)
	}
	if code, data := s.raw("GET", "/v1/sessions/"+ses.ID+"/files/out.txt", nil, ""); code != 200 || string(data) != "from the repl" {
		t.Fatalf("GET out.txt: %d %q; want what the REPL wrote", code, data)
	}
	if code, data := s.raw("GET", "/v1/sessions/"+ses.ID+"/files/in/data.txt", nil, ""); code != 404 {
		t.Fatalf("GET in/data.txt after the REPL removed it: %d %q; want 404", code, data)
	}
	if resp, _ = s.do("DELETE", "/v1/sessions/"+ses.ID, "", nil, nil); resp.StatusCode >= 300 {
		t.Fatalf("delete session: %d", resp.StatusCode)
	}
}
