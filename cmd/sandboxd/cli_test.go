package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/api/apitest"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// testServer is the real API handler over a fake job service.
type testServer struct {
	fake *apitest.Fake
	url  string
	mu   sync.Mutex
	args map[string]json.RawMessage // arguments of the last call
}

func newTestServer(t *testing.T, keys map[string]string) *testServer {
	t.Helper()
	ts := &testServer{fake: apitest.New()}
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{
		Name: "calculator", Description: "Evaluate an arithmetic expression.\nMore text.",
		InputSchema: []byte(`{"type":"object","properties":{"expression":{"type":"string"}}}`),
		Run:         func(context.Context, tools.Env, map[string]any) (tools.Result, error) { return tools.Result{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	ts.fake.Reg = reg
	ts.fake.Handle = func(tenant string, c tools.Call) (*tools.Result, error) {
		ts.mu.Lock()
		ts.args = nil
		_ = json.Unmarshal(c.Arguments, &ts.args)
		ts.mu.Unlock()
		switch c.Name {
		case "calculator":
			return &tools.Result{OK: true, Content: "42"}, nil
		case "bash":
			return &tools.Result{OK: false, Content: "out\n", Error: "process exited with code 3",
				Process: &tools.ProcessInfo{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}}, nil
		case "slow":
			return nil, nil
		case "strict":
			return nil, &tools.ValidationError{Tool: "strict", Problems: []tools.Problem{{Field: "/x", Message: "required"}}}
		}
		return nil, tools.ErrUnknownTool
	}
	srv := httptest.NewServer(api.New(ts.fake, api.Options{Keys: keys}))
	t.Cleanup(srv.Close)
	ts.url = srv.URL
	return ts
}

func (ts *testServer) lastArgs() map[string]json.RawMessage {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.args
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, serve serveFunc, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli(t.Context(), args, env2(env, &out, &errb, serve))
	return result{code, out.String(), errb.String()}
}

func env2(m map[string]string, out, errb io.Writer, serve serveFunc) env {
	return env{stdout: out, stderr: errb, getenv: envMap(m), euid: 1000, serve: serve}
}

func TestRun(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	env := map[string]string{"SANDBOXD_URL": ts.url}

	r := runCLI(t, env, nil, "run", "calculator", "--expression", "6*7")
	if r.code != 0 || r.stdout != "42\n" || r.stderr != "" {
		t.Fatalf("calculator: %+v", r)
	}
	if got := string(ts.lastArgs()["expression"]); got != `"6*7"` {
		t.Fatalf("expression argument %s", got)
	}

	// --json merged with convenience flags and --arg; flags before TOOL.
	r = runCLI(t, env, nil, "run", "--code", "print(1)", "calculator", "--json", `{"a":1,"code":"x"}`, "--arg", "n=5", "--arg", "s=hello world", "--path", "/p", "--command", "ls")
	args := ts.lastArgs()
	if r.code != 0 || string(args["a"]) != "1" || string(args["code"]) != `"print(1)"` || string(args["n"]) != "5" ||
		string(args["s"]) != `"hello world"` || string(args["path"]) != `"/p"` || string(args["command"]) != `"ls"` {
		t.Fatalf("merged arguments %v: %+v", args, r)
	}

	// A failed tool: content on stdout, stderr and error on stderr, exit 1.
	r = runCLI(t, env, nil, "run", "bash", "--command", "exit 3")
	if r.code != 1 || r.stdout != "out\n" || !strings.Contains(r.stderr, "err\n") || !strings.Contains(r.stderr, "error: process exited with code 3") {
		t.Fatalf("bash: %+v", r)
	}

	// JSON output is the job.
	r = runCLI(t, env, nil, "run", "calculator", "--output", "json", "--json", `{"x":1}`)
	var j struct {
		State  string `json:"state"`
		Limits struct {
			TimeoutMS int64 `json:"timeout_ms"`
		} `json:"limits"`
		Result struct {
			Content string `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || r.code != 0 || j.State != "succeeded" || j.Result.Content != "42" || !strings.Contains(r.stdout, `"arguments": {`) {
		t.Fatalf("json output: %+v %v", r, err)
	}

	// Server errors: exit 3 with the message.
	r = runCLI(t, env, nil, "run", "nope")
	if r.code != 3 || !strings.Contains(r.stderr, "unknown_tool") {
		t.Fatalf("unknown tool: %+v", r)
	}
	r = runCLI(t, env, nil, "run", "strict")
	if r.code != 3 || !strings.Contains(r.stderr, "/x: required") {
		t.Fatalf("validation: %+v", r)
	}

	// A job that is still running when --wait elapses.
	r = runCLI(t, env, nil, "run", "slow", "--wait", "100ms")
	if r.code != 3 || !strings.Contains(r.stderr, "still queued") {
		t.Fatalf("slow: %+v", r)
	}
}

func TestRunWaitsPastSubmit(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	go func() {
		// Finish the first job once the CLI has submitted it.
		for {
			if jobs, _, _ := ts.fake.List(context.Background(), "default", jobFilter()); len(jobs) > 0 {
				time.Sleep(50 * time.Millisecond)
				ts.fake.Finish(jobs[0].ID, &tools.Result{OK: true, Content: "finally"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r := runCLI(t, map[string]string{"SANDBOXD_URL": ts.url}, nil, "run", "slow", "--wait", "10s")
	if r.code != 0 || r.stdout != "finally\n" {
		t.Fatalf("slow: %+v", r)
	}
}

// TestRunAnnouncesApproval: a job that waits for a human's approval says
// so on stderr at once, with the approval's ID and how to decide it, and
// the result prints once it is decided.
func TestRunAnnouncesApproval(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	go func() {
		for {
			if jobs, _, _ := ts.fake.List(context.Background(), "default", jobFilter()); len(jobs) > 0 {
				ts.fake.Hold(jobs[0].ID, "apr_123", "writes need a human")
				time.Sleep(approvalPoll + time.Second) // past the first poll
				ts.fake.Finish(jobs[0].ID, &tools.Result{OK: true, Content: "approved and done"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r := runCLI(t, map[string]string{"SANDBOXD_URL": ts.url}, nil, "run", "slow", "--wait", "10s")
	if r.code != 0 || r.stdout != "approved and done\n" || !strings.Contains(r.stderr, "waits for approval apr_123 (writes need a human)") ||
		!strings.Contains(r.stderr, "/v1/approvals/apr_123") || !strings.Contains(r.stderr, `"decision":"approve"`) {
		t.Fatalf("approval: %+v", r)
	}
}

func TestRunAuthAndUnreachable(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, map[string]string{"sekrit": "t1"})
	r := runCLI(t, map[string]string{"SANDBOXD_URL": ts.url}, nil, "run", "calculator")
	if r.code != 3 || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("no key: %+v", r)
	}
	r = runCLI(t, map[string]string{"SANDBOXD_URL": ts.url, "SANDBOXD_API_KEY": "sekrit"}, nil, "run", "calculator")
	if r.code != 0 {
		t.Fatalf("env key: %+v", r)
	}
	r = runCLI(t, nil, nil, "run", "calculator", "--url", ts.url, "--api-key", "sekrit")
	if r.code != 0 {
		t.Fatalf("flag key: %+v", r)
	}
	r = runCLI(t, map[string]string{"SANDBOXD_URL": ts.url}, nil, "run", "calculator", "--url", "http://127.0.0.1:1")
	if r.code != 3 || !strings.Contains(r.stderr, "cannot reach the server at http://127.0.0.1:1") {
		t.Fatalf("unreachable: %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run"}, "exactly one TOOL"},
		{[]string{"run", "a", "b"}, "exactly one TOOL"},
		{[]string{"run", "calculator", "--json", "[1]"}, "not a JSON object"},
		{[]string{"run", "calculator", "--json", "{"}, "not a JSON object"},
		{[]string{"run", "calculator", "--output", "xml"}, "--output"},
		{[]string{"run", "calculator", "--arg", "novalue"}, "KEY=VALUE"},
		{[]string{"run", "calculator", "--bogus"}, "bogus"},
		{[]string{"tools", "--format", "xml"}, "--format"},
		{[]string{"tools", "extra"}, "unexpected argument"},
		{[]string{"serve", "extra"}, "unexpected argument"},
		{[]string{"serve", "--port", "1"}, "port"},
	} {
		r := runCLI(t, map[string]string{"SANDBOXD_URL": "http://127.0.0.1:1"}, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v, want exit 2 mentioning %q", tc.args, r, tc.want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"--help"}, {"help", "run"}, {"run", "-h"}, {"serve", "-help"}, {"help", "tools"}} {
		if r := runCLI(t, nil, nil, args...); r.code != 0 || (r.stdout+r.stderr) == "" {
			t.Errorf("%v: %+v", args, r)
		}
	}
	if r := runCLI(t, nil, nil, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "sandboxd ") {
		t.Fatalf("version: %+v", r)
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	env := map[string]string{"SANDBOXD_URL": ts.url}
	r := runCLI(t, env, nil, "tools")
	if r.code != 0 || !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "calculator") ||
		!strings.Contains(r.stdout, "Evaluate an arithmetic expression.") || strings.Contains(r.stdout, "More text") {
		t.Fatalf("tools: %+v", r)
	}
	for _, f := range []string{"json", "openai", "anthropic", "mcp"} {
		r = runCLI(t, env, nil, "tools", "--format", f)
		var list []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || r.code != 0 || len(list) != 1 {
			t.Fatalf("tools --format %s: %+v %v", f, r, err)
		}
	}
	if r := runCLI(t, nil, nil, "tools", "--url", "http://127.0.0.1:1"); r.code != 3 {
		t.Fatalf("tools unreachable: %+v", r)
	}
}

func TestServeCommand(t *testing.T) {
	t.Parallel()
	var got *config.Config
	fake := func(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
		got = cfg
		return nil
	}
	dir := t.TempDir()
	r := runCLI(t, map[string]string{"SANDBOXD_ADDR": "127.0.0.1:9999"}, fake, "serve", "--data-dir", dir, "--log-level", "debug")
	if r.code != 0 || got == nil || got.Addr != "127.0.0.1:9999" || got.DataDir != dir || got.LogLevel != "debug" {
		t.Fatalf("serve: %+v %+v", r, got)
	}

	// No keys on a non-loopback address: refused before serving.
	got = nil
	r = runCLI(t, nil, fake, "serve", "--addr", "0.0.0.0:8080", "--data-dir", dir)
	if r.code != 2 || got != nil || !strings.Contains(r.stderr, "not a loopback address") {
		t.Fatalf("non-loopback: %+v", r)
	}
	r = runCLI(t, map[string]string{"SANDBOXD_API_KEYS": "k1:alice"}, fake, "serve", "--addr", "0.0.0.0:8080", "--data-dir", dir)
	if r.code != 0 || got.APIKeys()["k1"] != "alice" {
		t.Fatalf("non-loopback with keys: %+v", r)
	}

	failing := func(context.Context, *config.Config, *slog.Logger) error { return errors.New("store is locked") }
	r = runCLI(t, nil, failing, "serve", "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "store is locked") {
		t.Fatalf("serve failure: %+v", r)
	}
}

type fakeShutdowner struct {
	mu     sync.Mutex
	called bool
}

func (f *fakeShutdowner) Shutdown(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called = true
	return nil
}

// TestGracefulShutdown: cancelling the serve context stops the server, lets
// a long poll answer, and then shuts the job service down.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := config.Defaults()
	cfg.Addr, cfg.DataDir = addr, t.TempDir()

	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/poll" {
			close(started)
			<-r.Context().Done() // a long poll, released at shutdown
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	svc := &fakeShutdowner{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- listenAndServe(ctx, &cfg, newLogger(&syncWriter{w: &logs}, "info"), h, svc, netclass.NewProtected())
	}()

	var resp *http.Response
	for i := 0; i < 100; i++ {
		if resp, err = http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/poll")
		if err != nil {
			polled <- 0
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listenAndServe did not return")
	}
	if code := <-polled; code != http.StatusAccepted {
		t.Fatalf("long poll answered %d", code)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if !svc.called {
		t.Fatal("job service not shut down")
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func jobFilter() job.ListFilter { return job.ListFilter{} }
