//go:build integration

package integration

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPythonAndBashThroughAPI(t *testing.T) {
	s := startServer(t, "")
	j := s.run("", "python_repl", map[string]any{"code": "x = 6*7\nprint('hello')\nx"})
	if j.State != "succeeded" || !j.Result.OK {
		t.Fatalf("python_repl: %+v", j)
	}
	if !strings.Contains(j.Result.Content, "hello") || !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("python_repl content %q: want hello and the trailing expression 42", j.Result.Content)
	}
	j = s.run("", "python_repl", map[string]any{"code": "1/0"})
	if j.Result.OK || !strings.Contains(j.Result.Content+j.Result.Error+j.Result.Process.Stderr, "ZeroDivisionError") {
		t.Fatalf("exception should be a failed result with a traceback: %+v", j.Result)
	}
	j = s.run("", "bash", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if j.Result.OK || j.Result.Process == nil || j.Result.Process.ExitCode != 3 {
		t.Fatalf("bash exit 3: %+v", j.Result)
	}
	if j.Result.Process.Stdout != "out\n" || j.Result.Process.Stderr != "err\n" {
		t.Fatalf("bash streams: %+v", j.Result.Process)
	}
	j = s.run("", "calculator", map[string]any{"expression": "2**100 + 7 // 2"})
	if !j.Result.OK || strings.TrimSpace(j.Result.Content) != "1267650600228229401496703205379" {
		t.Fatalf("calculator: %+v", j.Result)
	}
}

// TestIsolationThroughAPI attacks the sandbox from inside a bash job.
func TestIsolationThroughAPI(t *testing.T) {
	s := startServer(t, "")
	// A server on the host's loopback that no sandbox may reach.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("reached\n"))
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	marker := "/tmp/sandboxd-it-escape-" + time.Now().Format("150405.000000000")
	defer os.Remove(marker)

	cases := []struct {
		name, cmd string
		limits    map[string]any
		check     func(t *testing.T, j jobView)
	}{
		{"write outside workspace", "echo x > " + marker + "; echo x > /etc/sandboxd-escape; echo x > /usr/escape; echo done", nil, func(t *testing.T, j jobView) {
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("sandbox wrote %s on the host", marker)
			}
			if _, err := os.Stat("/etc/sandboxd-escape"); err == nil {
				os.Remove("/etc/sandboxd-escape")
				t.Fatal("sandbox wrote /etc on the host")
			}
		}},
		{"network", "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', " + strconv.Itoa(port) + "), timeout=2); print(s.recv(10))\"", nil, func(t *testing.T, j jobView) {
			if j.Result.OK || strings.Contains(j.Result.Process.Stdout, "reached") {
				t.Fatalf("sandbox reached a host service: %+v", j.Result.Process)
			}
		}},
		{"host processes", "ls /proc | grep -c '^[0-9]'", nil, func(t *testing.T, j jobView) {
			n := strings.TrimSpace(j.Result.Process.Stdout)
			if n == "" || len(n) > 1 { // a handful at most: the shell, ls, grep
				t.Fatalf("sandbox sees %q processes", n)
			}
		}},
		{"memory", "python3 -c \"b = bytearray(400*1024*1024); print(len(b))\"", map[string]any{"memory_bytes": 64 << 20}, func(t *testing.T, j jobView) {
			if j.Result.OK || !j.Result.Process.OOMKilled {
				t.Fatalf("want OOM kill: %+v", j.Result.Process)
			}
		}},
		{"pids", "for i in $(seq 200); do sleep 5 & done; wait; echo survived", map[string]any{"pids": 32, "timeout_ms": 10000}, func(t *testing.T, j jobView) {
			if j.Result.OK {
				t.Fatalf("200 processes under pids=32 should fail: %+v", j.Result.Process)
			}
		}},
		{"timeout", "trap '' TERM; setsid sleep 1000 & sleep 1000", map[string]any{"timeout_ms": 1000}, func(t *testing.T, j jobView) {
			if !j.Result.Process.TimedOut {
				t.Fatalf("want timeout: %+v", j.Result.Process)
			}
			out, _ := exec.Command("pgrep", "-f", "sleep 1000").Output()
			if len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("processes outlived the sandbox: %s", out)
			}
		}},
		{"identity", "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; ls /proc/self/fd", nil, func(t *testing.T, j jobView) {
			out := j.Result.Process.Stdout
			for _, want := range []string{"65534\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
				if !strings.Contains(out, want) {
					t.Fatalf("want %q in:\n%s", want, out)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var j jobView
			body := map[string]any{"tool": "bash", "arguments": map[string]any{"command": tc.cmd}}
			if tc.limits != nil {
				body["limits"] = tc.limits
			}
			resp, data := s.do("POST", "/v1/jobs?wait=true", "", body, &j)
			if resp.StatusCode != 200 || j.Result == nil || j.Result.Process == nil {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			tc.check(t, j)
		})
	}
}

func TestTenantsAndAuth(t *testing.T) {
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
  - name: bob
    api_keys: [key-bob]
`)
	resp, _ := s.do("GET", "/v1/jobs", "", nil, nil)
	if resp.StatusCode != 401 {
		t.Fatalf("no key: status %d, want 401", resp.StatusCode)
	}
	j := s.run("key-alice", "calculator", map[string]any{"expression": "1+1"})
	if j.Tenant != "alice" {
		t.Fatalf("tenant %q", j.Tenant)
	}
	resp, data := s.do("GET", "/v1/jobs/"+j.ID, "key-bob", nil, nil)
	if resp.StatusCode != 404 {
		t.Fatalf("bob reads alice's job: %d %s", resp.StatusCode, data)
	}
	resp, _ = s.do("GET", "/v1/jobs/"+j.ID, "key-alice", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("alice reads her job: %d", resp.StatusCode)
	}
	var list struct {
		Jobs []jobView `json:"jobs"`
	}
	s.do("GET", "/v1/jobs", "key-bob", nil, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("bob lists %d jobs", len(list.Jobs))
	}
}

func TestBadInput(t *testing.T) {
	s := startServer(t, "")
	cases := []struct {
		name, body string
		status     int
		want       string
	}{
		{"bad json", `{"tool": "calculator",`, 400, ""},
		{"unknown field", `{"tool": "calculator", "arguments": {"expression": "1"}, "nope": 1}`, 400, "nope"},
		{"unknown tool", `{"tool": "rm_rf", "arguments": {}}`, 404, "rm_rf"},
		{"schema violation", `{"tool": "calculator", "arguments": {"expression": 5}}`, 422, "expression"},
		{"limit above ceiling", `{"tool": "bash", "arguments": {"command": "true"}, "limits": {"memory_bytes": 1099511627776}}`, 400, "memory"},
		{"negative limit", `{"tool": "bash", "arguments": {"command": "true"}, "limits": {"pids": -1}}`, 400, "pids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := s.do("POST", "/v1/jobs", "", tc.body, nil)
			if resp.StatusCode != tc.status || !strings.Contains(string(data), `"error"`) || !strings.Contains(string(data), tc.want) {
				t.Fatalf("status %d body %s; want %d mentioning %q", resp.StatusCode, data, tc.status, tc.want)
			}
		})
	}
	big := `{"tool":"python_repl","arguments":{"code":"` + strings.Repeat("x", 3<<20) + `"}}`
	resp, _ := s.do("POST", "/v1/jobs", "", big, nil)
	if resp.StatusCode != 413 {
		t.Fatalf("oversized body: %d", resp.StatusCode)
	}
	var list struct {
		Jobs []jobView `json:"jobs"`
	}
	s.do("GET", "/v1/jobs", "", nil, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("bad input created %d jobs", len(list.Jobs))
	}
}

func TestIdempotencyAndEvents(t *testing.T) {
	s := startServer(t, "")
	body := map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo one; sleep 0.3; echo two"}, "idempotency_key": "k1"}
	var a, b jobView
	s.do("POST", "/v1/jobs", "", body, &a)
	s.do("POST", "/v1/jobs", "", body, &b)
	if a.ID == "" || a.ID != b.ID {
		t.Fatalf("idempotent submit gave %q and %q", a.ID, b.ID)
	}
	req, _ := http.NewRequest("GET", s.URL+"/v1/jobs/"+a.ID+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var types []string
	var stdout strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur = strings.TrimPrefix(line, "event: ")
			types = append(types, cur)
		case strings.HasPrefix(line, "data: ") && cur == "stdout":
			stdout.WriteString(line)
		}
	}
	got := strings.Join(types, ",")
	if !strings.HasPrefix(got, "queued,started") || !strings.HasSuffix(got, "finished") || !strings.Contains(got, "stdout") {
		t.Fatalf("events %s", got)
	}
	if !strings.Contains(stdout.String(), "one") || !strings.Contains(stdout.String(), "two") {
		t.Fatalf("stdout events %q", stdout.String())
	}
}

func TestQueueFull429(t *testing.T) {
	s := startServer(t, `
queue:
  size: 2
  workers: 1
`)
	sleep := map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 3"}}
	var saw429 bool
	for i := 0; i < 8; i++ {
		resp, data := s.do("POST", "/v1/jobs", "", sleep, nil)
		switch resp.StatusCode {
		case 202:
		case 429:
			saw429 = true
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(data), "error") {
				t.Fatalf("429 without Retry-After or error body: %v %s", resp.Header, data)
			}
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
	}
	if !saw429 {
		t.Fatal("8 submissions into a queue of 2 with one worker never got 429")
	}
}
