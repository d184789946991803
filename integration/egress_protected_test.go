//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestEgressProtectedThroughAPI is issue 9 item 2 through the public API:
// a tenant whose allow_private_cidrs covers every address ([0.0.0.0/0,
// ::/0]) and whose allowlist names sandboxd's own port on 0.0.0.0, ::,
// 127.0.0.1 and localhost tries to reach sandboxd's API and /metrics from
// a sandbox (through the egress proxy) and with http_request: directly, in
// odd spellings and after a 302 from a server it may reach (/v1/tools:
// an attack that got through would show in sandboxd's request counter). Every attempt
// is refused; the allowed server (the test's own, on loopback) is reached,
// so the policy is live.
func TestEgressProtectedThroughAPI(t *testing.T) {
	var okHits atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	okSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits.Add(1)
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, "http://"+to+"/v1/tools", http.StatusFound)
			return
		}
		fmt.Fprint(w, "hello-open")
	})}
	go okSrv.Serve(l)
	defer okSrv.Close()
	okPort := l.Addr().(*net.TCPAddr).Port

	for _, rc := range []struct{ name, config string }{
		{"local", ""},
		{"docker", dockerConfig("pool:\n  size: 0\n")},
		{"docker-runsc", runtimeConfig("docker", "runsc")},
		{"containerd", runtimeConfig("containerd", "")},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if strings.HasPrefix(rc.name, "docker") {
				needDocker(t)
			}
			addr := freeAddr(t)
			_, ps, _ := net.SplitHostPort(addr)
			config := rc.config + fmt.Sprintf(`
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      egress:
        allow:
          - {host: "0.0.0.0", ports: [%[1]s]}
          - {host: "::", ports: [%[1]s]}
          - {host: "::ffff:0.0.0.0", ports: [%[1]s]}
          - {host: "127.0.0.1", ports: [%[1]s, %[2]d]}
          - {host: "::1", ports: [%[1]s]}
          - {host: "localhost", ports: [%[1]s]}
        allow_private_cidrs: [0.0.0.0/0, "::/0"]
`, ps, okPort)
			s := &server{t: t, DataDir: dataDir(t), addr: addr, Config: filepath.Join(t.TempDir(), "sandboxd.yaml")}
			if err := os.WriteFile(s.Config, []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
			s.start()
			t.Cleanup(func() { s.stop(syscall.SIGTERM) })
			before := s.getMetrics()
			apiReqs := func(metrics []byte) int {
				n := 0
				for _, line := range strings.Split(string(metrics), "\n") {
					if strings.HasPrefix(line, "sandboxd_http_requests_total{") && !strings.Contains(line, `route="/metrics"`) {
						var v int
						fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
						n += v
					}
				}
				return n
			}

			attacks := []string{
				"0.0.0.0:" + ps, "[::]:" + ps, "[::ffff:0.0.0.0]:" + ps, "[::ffff:0:0]:" + ps, "[0:0::0]:" + ps,
				"127.0.0.1:" + ps, "[::1]:" + ps, "localhost:" + ps, "0:" + ps, "0x0:" + ps, "0.0:" + ps,
			}
			var urls []string
			for _, a := range attacks {
				urls = append(urls, "http://"+a+"/v1/tools")
			}
			for _, a := range []string{"0.0.0.0:" + ps, "[::]:" + ps, "127.0.0.1:" + ps} {
				urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/?to=%s", okPort, a))
			}

			// From a sandbox, through the egress proxy.
			var sess struct{ ID string }
			resp, data := s.do("POST", "/v1/sessions", "k-acme", map[string]any{"effects": []string{"exec", "file_read", "file_write", "http"}}, &sess)
			if resp.StatusCode != 201 {
				t.Fatalf("create session: %d %s", resp.StatusCode, data)
			}
			code := fmt.Sprintf(`import urllib.request, urllib.error
for u in %s + ["http://127.0.0.1:%d/"]:
    try:
        print("BODY", u, urllib.request.urlopen(u, timeout=10).read().decode()[:60].replace("\n", " "))
    except urllib.error.HTTPError as e:
        print("HTTP", u, e.code, e.read().decode()[:150].replace("\n", " "))
    except Exception as e:
        print("ERR", u, type(e).__name__, e)`, pyList(urls), okPort)
			var j jobView
			resp, data = s.do("POST", "/v1/jobs?wait=true", "k-acme", map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": code}, "session_id": sess.ID}, &j)
			if resp.StatusCode != 200 || j.Result == nil {
				t.Fatalf("python_repl: %d %s", resp.StatusCode, data)
			}
			out := j.Result.Content
			for _, u := range urls {
				if !strings.Contains(out, "HTTP "+u+" 403 egress denied") {
					t.Errorf("sandbox fetch of %s was not refused by the proxy:\n%s", u, out)
				}
			}
			if !strings.Contains(out, fmt.Sprintf("BODY http://127.0.0.1:%d/ hello-open", okPort)) {
				t.Errorf("the allowed server was not reached:\n%s", out)
			}

			// The in-process http_request tool, same tenant.
			for _, u := range urls {
				j := s.run("k-acme", "http_request", map[string]any{"url": u})
				if j.Result.OK || !strings.Contains(j.Result.Error, "refused") {
					t.Errorf("http_request %s: %+v", u, j.Result)
				}
			}
			if j := s.run("k-acme", "http_request", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/", okPort)}); !j.Result.OK || !strings.Contains(j.Result.Content, "hello-open") {
				t.Errorf("http_request to the allowed server: %+v", j.Result)
			}

			// Nothing of the above reached sandboxd's API: only this test's
			// own calls are counted (one session, one python job, the
			// http_request jobs).
			after := s.getMetrics()
			if got, want := apiReqs(after)-apiReqs(before), 2+len(urls)+1; got != want {
				t.Errorf("sandboxd's API served %d requests, want %d (this test's own)", got, want)
			}
		})
	}
}

// pyList writes ss as a Python list literal.
func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
