//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEgressThroughAPI runs python in a session with the http effect on each
// runner: the sandbox reaches an allowlisted server (on the test's own
// loopback, allowed for this tenant by allow_private_cidrs) only through
// the egress proxy; a server off the allowlist gets 403, a tenant without
// an egress policy reaches nothing, and every decision is in the job's
// audit record and in /metrics.
func TestEgressThroughAPI(t *testing.T) {
	var hits atomic.Int64
	serve := func(body string) (int, func()) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, body)
		})}
		go srv.Serve(l)
		return l.Addr().(*net.TCPAddr).Port, func() { srv.Close() }
	}
	okPort, stop1 := serve("hello-egress")
	defer stop1()
	offPort, stop2 := serve("should-not-be-read")
	defer stop2()

	tenants := fmt.Sprintf(`
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      egress:
        allow:
          - host: 127.0.0.1
            ports: [%d]
            methods: [GET]
        allow_private_cidrs: [127.0.0.1/32]
  - name: free
    api_keys: [k-free]
`, okPort)
	for _, rc := range []struct{ name, config string }{
		{"local", tenants},
		{"docker", dockerConfig("pool:\n  size: 0\n") + tenants},
		{"docker-runsc", runtimeConfig("docker", "runsc") + tenants},
		{"containerd", runtimeConfig("containerd", "") + tenants},
		{"containerd-runsc", runtimeConfig("containerd", "runsc") + tenants},
		{"kubernetes", ""}, // the pod's proxy connections carried to sandboxd's proxy over the agent
	} {
		t.Run(rc.name, func(t *testing.T) {
			if strings.HasPrefix(rc.name, "docker") {
				needDocker(t)
			}
			if rc.name == "kubernetes" {
				rc.config = kubernetesConfig(t) + tenants
			}
			s := startServer(t, rc.config)
			session := func(key string) string {
				var sess struct{ ID, State string }
				resp, data := s.do("POST", "/v1/sessions", key, map[string]any{"effects": []string{"exec", "file_read", "file_write", "http"}}, &sess)
				if resp.StatusCode != 201 {
					t.Fatalf("create session: %d %s", resp.StatusCode, data)
				}
				return sess.ID
			}
			type egressJob struct {
				ID     string
				State  string
				Result struct {
					OK      bool
					Content string
					Error   string
				}
				Egress []struct {
					Method  string
					Host    string
					Port    int
					Allowed bool
					Rule    int
					Reason  string
					BytesIn int64 `json:"bytes_in"`
				}
			}
			fetch := func(key, sess string, port int) egressJob {
				code := fmt.Sprintf(`import urllib.request, urllib.error
try:
    print("BODY", urllib.request.urlopen("http://127.0.0.1:%d/", timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code, e.read().decode()[:200])
except Exception as e:
    print("ERR", type(e).__name__, e)`, port)
				var j egressJob
				resp, data := s.do("POST", "/v1/jobs?wait=true", key, map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": code}, "session_id": sess}, &j)
				if resp.StatusCode != 200 {
					t.Fatalf("python_repl: %d %s", resp.StatusCode, data)
				}
				// A request is audited when its connection ends, which may
				// be just after the job finished: the record catches up.
				for deadline := time.Now().Add(3 * time.Second); len(j.Egress) == 0 && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
					s.do("GET", "/v1/jobs/"+j.ID, key, nil, &j)
				}
				return j
			}

			sess := session("k-acme")
			before := hits.Load()
			j := fetch("k-acme", sess, okPort)
			if !strings.Contains(j.Result.Content, "BODY hello-egress") {
				t.Fatalf("allowlisted fetch: %+v", j.Result)
			}
			if hits.Load() != before+1 {
				t.Fatalf("the allowed server saw %d requests, want 1", hits.Load()-before)
			}
			if len(j.Egress) != 1 || !j.Egress[0].Allowed || j.Egress[0].Port != okPort || j.Egress[0].Rule != 0 || j.Egress[0].BytesIn == 0 {
				t.Fatalf("audit of the allowed fetch: %+v", j.Egress)
			}

			before = hits.Load()
			j = fetch("k-acme", sess, offPort)
			if !strings.Contains(j.Result.Content, "HTTP 403") || strings.Contains(j.Result.Content, "should-not-be-read") {
				t.Fatalf("fetch off the allowlist: %+v", j.Result)
			}
			if len(j.Egress) != 1 || j.Egress[0].Allowed || j.Egress[0].Rule != -1 || j.Egress[0].Reason == "" {
				t.Fatalf("audit of the denied fetch: %+v", j.Egress)
			}

			// A tenant without an egress policy reaches nothing.
			j = fetch("k-free", session("k-free"), okPort)
			if !strings.Contains(j.Result.Content, "HTTP 403") {
				t.Fatalf("tenant without egress policy: %+v", j.Result)
			}
			if hits.Load() != before {
				t.Fatalf("denied requests reached a server (%d)", hits.Load()-before)
			}

			metrics := s.getMetrics()
			for _, want := range []string{
				`sandboxd_egress_requests_total{decision="allowed",tenant="acme"} 1`,
				`sandboxd_egress_requests_total{decision="denied",tenant="acme"} 1`,
				`sandboxd_egress_requests_total{decision="denied",tenant="free"} 1`,
			} {
				if !strings.Contains(string(metrics), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		})
	}
}

// runtimeConfig runs sandboxd on a container runner ("docker" or
// "containerd") with an OCI runtime ("" for runc, "runsc" for gVisor) and
// no warm pool.
func runtimeConfig(runnerName, runtime string) string {
	return runtimePoolConfig(runnerName, runtime, 0)
}

// runtimePoolConfig is runtimeConfig with a warm pool of pool sandboxes.
func runtimePoolConfig(runnerName, runtime string, pool int) string {
	return fmt.Sprintf(`
runner:
  name: %s
  %s:
    agent_path: %s
    image: sandboxd/python:latest
    runtime: %q
pool:
  size: %d
`, runnerName, runnerName, agentPath, runtime, pool)
}
