//go:build integration

// Package integration runs end-to-end tests against real sandboxd processes
// built from this tree, using the local runner on this host.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var binPath, agentPath, launcherPath string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("integration tests need root (namespaces, cgroups)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sandboxd-it-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "sandboxd")
	agentPath = filepath.Join(dir, "sandbox-agent")
	launcherPath = filepath.Join(dir, "sandbox-launch") // found next to sandboxd, like the agent
	for _, b := range []struct{ out, pkg string }{{binPath, "../cmd/sandboxd"}, {agentPath, "../cmd/sandbox-agent"}, {launcherPath, "../cmd/sandbox-launch"}} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Println("build", b.pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running sandboxd process.
type server struct {
	t   testing.TB
	URL string
	// MetricsURL is the metrics listener's (metrics_addr): /metrics is
	// served there, not by the API.
	MetricsURL string
	DataDir    string
	Args       []string // more serve flags
	Config     string
	cmd        *exec.Cmd
	log        *bytes.Buffer
	addr       string
	metrics    string
	// stoppedWith is the signal of the last stop.
	stoppedWith syscall.Signal
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// freeAddrs is n distinct free loopback addresses: each is held until all
// are chosen (two freeAddr calls in a row can get the same port, and a
// server given it for both addr and metrics_addr refuses to start).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// dataDir is a fresh data dir, removed at the end of the test. Not
// t.TempDir: a long test name makes the container runners' socket paths
// under it exceed the kernel's 108 bytes, which sandboxd refuses.
func dataDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startServer starts sandboxd with the given YAML config (may be empty).
func startServer(t testing.TB, config string) *server {
	t.Helper()
	return startServerArgs(t, config)
}

// startServerArgs is startServer with more serve flags.
func startServerArgs(t testing.TB, config string, args ...string) *server {
	t.Helper()
	a := freeAddrs(t, 2)
	s := &server{t: t, DataDir: dataDir(t), addr: a[0], metrics: a[1], Args: args}
	if config != "" {
		s.Config = filepath.Join(t.TempDir(), "sandboxd.yaml")
		if err := os.WriteFile(s.Config, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.start()
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		s.releaseWorkspaces()
	})
	return s
}

// releaseWorkspaces unmounts the workspace filesystems a stopped sandboxd
// left (a test that killed it without a restart leaves them; a sandboxd
// stopped with SIGTERM must leave none), so that no mount or loop device
// outlives the test.
func (s *server) releaseWorkspaces() {
	left := mountsUnder(s.t, filepath.Join(s.DataDir, "workspaces"))
	if len(left) > 0 && s.stoppedWith == syscall.SIGTERM {
		s.t.Errorf("sandboxd stopped with SIGTERM left workspace mounts: %v", left)
	}
	for i := len(left) - 1; i >= 0; i-- {
		_ = syscall.Unmount(strings.Fields(left[i])[0], syscall.MNT_DETACH)
	}
}

func (s *server) start() {
	s.t.Helper()
	for s.metrics == "" || s.metrics == s.addr {
		s.metrics = freeAddr(s.t)
	}
	args := []string{"serve", "--addr", s.addr, "--metrics-addr", s.metrics, "--data-dir", s.DataDir}
	if s.Config != "" {
		args = append(args, "--config", s.Config)
	}
	args = append(args, s.Args...)
	s.cmd = exec.Command(binPath, args...)
	s.log = &bytes.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.URL = "http://" + s.addr
	s.MetricsURL = "http://" + s.metrics
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if exited(s.cmd.Process.Pid) {
			break // it refused to start: its log says why
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop(syscall.SIGKILL)
	s.t.Fatalf("sandboxd did not become healthy; log:\n%s", s.log.String())
}

// exited: the child pid has exited and waits to be reaped.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// stop ends the process with sig and waits for it.
func (s *server) stop(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.stoppedWith = sig
	s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	if s.t.Failed() {
		s.t.Logf("sandboxd log:\n%s", s.log.String())
	}
	s.cmd = nil
}

// getMetrics reads /metrics from the metrics listener.
func (s *server) getMetrics() []byte {
	s.t.Helper()
	resp, err := http.Get(s.MetricsURL + "/metrics")
	if err != nil {
		s.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	return body
}

// do sends a JSON request and decodes a JSON response into out (if non-nil).
func (s *server) do(method, path, key string, body any, out any) (*http.Response, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case string:
			rd = strings.NewReader(b)
		default:
			buf, _ := json.Marshal(b)
			rd = bytes.NewReader(buf)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp, data
}

// jobView is the subset of the job JSON the tests read.
type jobView struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Tool   string `json:"tool"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	// Cached: answered from the result cache.
	Cached bool `json:"cached"`
	Result *struct {
		OK        bool     `json:"ok"`
		Content   string   `json:"content"`
		Error     string   `json:"error"`
		Effects   []string `json:"effects"`
		Artifacts []struct {
			Name     string `json:"name"`
			MimeType string `json:"mime_type"`
			Size     int64  `json:"size"`
			URL      string `json:"url"`
			Data     []byte `json:"data"`
		} `json:"artifacts"`
		Process *struct {
			ExitCode        int    `json:"exit_code"`
			Signal          string `json:"signal"`
			OOMKilled       bool   `json:"oom_killed"`
			TimedOut        bool   `json:"timed_out"`
			OutputTruncated bool   `json:"output_truncated"`
			Stdout          string `json:"stdout"`
			Stderr          string `json:"stderr"`
		} `json:"process"`
	} `json:"result"`
}

// run submits a tool call with ?wait=true and returns the finished job.
func (s *server) run(key, tool string, args any) jobView {
	s.t.Helper()
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", key, map[string]any{"tool": tool, "arguments": args}, &j)
	if resp.StatusCode != 200 {
		s.t.Fatalf("run %s: status %d: %s", tool, resp.StatusCode, data)
	}
	if j.Result == nil {
		s.t.Fatalf("run %s: no result: %s", tool, data)
	}
	return j
}
