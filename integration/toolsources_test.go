//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

type toolsList struct {
	Tools []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"input_schema"`
		Effects      []string        `json:"effects"`
		ParallelSafe bool            `json:"parallel_safe"`
		Source       string          `json:"source"`
		Available    bool            `json:"available"`
		Unavailable  string          `json:"unavailable"`
	} `json:"tools"`
	Sources []struct {
		Name     string   `json:"name"`
		Kind     string   `json:"kind"`
		State    string   `json:"state"`
		Error    string   `json:"error"`
		Tools    []string `json:"tools"`
		Restarts int      `json:"restarts"`
		Problems []struct {
			Path  string `json:"path"`
			Error string `json:"error"`
		} `json:"problems"`
	} `json:"sources"`
}

func (s *server) tools() toolsList {
	s.t.Helper()
	var l toolsList
	if resp, data := s.do("GET", "/v1/tools", "", nil, &l); resp.StatusCode != 200 {
		s.t.Fatalf("tools: %d %s", resp.StatusCode, data)
	}
	return l
}

func (l toolsList) names() []string {
	var n []string
	for _, t := range l.Tools {
		n = append(n, t.Name)
	}
	return n
}

// Tools without Go code: a YAML argv tool (never through a shell), a
// script tool (JSON on stdin, JSON answer), a Python function tool (schema
// derived in a sandbox; one without a docstring refused), bad files
// reported while the good ones load, a built-in replaced only when the
// config says so, and reload through the admin endpoint and SIGHUP.
func TestToolsDirectory(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"echo_args.yaml": `name: echo_args
description: Print each argument on its own line.
input_schema: {type: object, properties: {a: {type: string}, b: {type: string}}, required: [a]}
argv: [/usr/bin/printf, '%s\n', "{a}", "--b={b}"]
`,
		"stats.yaml": `name: stats
description: Mean of a list of numbers.
input_schema: {type: object, properties: {numbers: {type: array, items: {type: number}, minItems: 1}}, required: [numbers]}
script: stats.py
`,
		"stats.py": "#!/usr/bin/env python3\nimport json, sys\nn = json.load(sys.stdin)['numbers']\nprint(json.dumps({'content': 'mean %g' % (sum(n) / len(n))}))\n",
		"convert.py": `from typing import Literal, Optional

def convert(value: float, unit: Literal["km", "mi"], digits: Optional[int] = 2) -> str:
    """Convert a distance between kilometres and miles.

    Args:
        value: The distance.
        unit: The unit of value.
    """
    out = value * 0.621371 if unit == "km" else value / 0.621371
    return f"{round(out, digits or 0)}"
`,
		"nodoc.py":    "def nodoc(x: int) -> int:\n    return x\n",
		"broken.yaml": "name: broken\ndescription: refers to a missing argument\nargv: [/bin/echo, '{nope}']\n",
		"bash.yaml":   "name: bash\ndescription: Not the real bash.\nargv: [/bin/echo, fake]\n",
	}
	for name, content := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	s := startServer(t, "tools_dir: "+dir+"\n")
	l := s.tools()
	for _, want := range []string{"echo_args", "stats", "convert"} {
		if !slices.Contains(l.names(), want) {
			t.Errorf("%s not listed: %v", want, l.names())
		}
	}
	if slices.Contains(l.names(), "nodoc") || slices.Contains(l.names(), "broken") {
		t.Errorf("a bad file loaded: %v", l.names())
	}
	problems := map[string]string{}
	for _, src := range l.Sources {
		if src.Kind == "directory" {
			for _, p := range src.Problems {
				problems[filepath.Base(p.Path)] = p.Error
			}
		}
	}
	for file, want := range map[string]string{"nodoc.py": "no docstring", "broken.yaml": "{nope} is not a property", "bash.yaml": "would replace the built-in"} {
		if !strings.Contains(problems[file], want) {
			t.Errorf("%s: problem %q, want %q", file, problems[file], want)
		}
	}
	if !strings.Contains(s.log.String(), "tool file refused") || !strings.Contains(s.log.String(), "nodoc.py") {
		t.Errorf("the refusals are not logged with their path")
	}
	for _, tl := range l.Tools {
		if tl.Name == "convert" {
			var sch struct {
				Properties map[string]map[string]any `json:"properties"`
				Required   []string                  `json:"required"`
			}
			json.Unmarshal(tl.InputSchema, &sch)
			if tl.Description != "Convert a distance between kilometres and miles." || !slices.Equal(sch.Required, []string{"value", "unit"}) ||
				sch.Properties["value"]["type"] != "number" || sch.Properties["unit"]["description"] != "The unit of value." ||
				fmt.Sprint(sch.Properties["unit"]["enum"]) != "[km mi]" || sch.Properties["digits"]["default"] != 2.0 {
				t.Errorf("derived schema %s %q", tl.InputSchema, tl.Description)
			}
		}
		if tl.Name == "bash" && tl.Source != "" {
			t.Errorf("bash was replaced: %+v", tl)
		}
	}
	// The custom tools take part in turns like any other.
	code, tv, raw := s.postTurn("", "", `[
		{"type":"tool_use","id":"a","name":"echo_args","input":{"a":"two words; $(id)"}},
		{"type":"tool_use","id":"b","name":"stats","input":{"numbers":[1,2,6]}},
		{"type":"tool_use","id":"c","name":"convert","input":{"value":10,"unit":"km"}},
		{"type":"tool_use","id":"d","name":"convert","input":{"value":10,"unit":"parsecs"}}]`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if c := tv.Calls[0]; c.Content != "two words; $(id)" {
		t.Errorf("argv: %q (an absent optional argument's element is dropped, values never reach a shell)", c.Content)
	}
	if c := tv.Calls[1]; c.Content != "mean 3" {
		t.Errorf("script: %+v", c)
	}
	if c := tv.Calls[2]; c.Content != "6.21" {
		t.Errorf("python: %+v", c)
	}
	if c := tv.Calls[3]; c.State != "invalid" || !strings.Contains(c.Content, `/unit: must be one of "km", "mi"`) {
		t.Errorf("python enum: %+v", c)
	}

	// Reload through the admin endpoint: a fixed file loads, a removed one
	// goes.
	os.WriteFile(filepath.Join(dir, "nodoc.py"), []byte("def nodoc(x: int) -> int:\n    \"\"\"Return x.\"\"\"\n    return x\n"), 0o644)
	os.Remove(filepath.Join(dir, "echo_args.yaml"))
	var st struct {
		Tools    []string `json:"tools"`
		Problems []any    `json:"problems"`
	}
	if resp, data := s.do("POST", "/v1/admin/tools/reload", "", nil, &st); resp.StatusCode != 200 || !slices.Contains(st.Tools, "nodoc") || slices.Contains(st.Tools, "echo_args") || len(st.Problems) != 2 {
		t.Fatalf("reload: %d %s", resp.StatusCode, data)
	}
	if names := s.tools().names(); slices.Contains(names, "echo_args") || !slices.Contains(names, "nodoc") {
		t.Errorf("after reload: %v", names)
	}
	// SIGHUP does the same.
	os.WriteFile(filepath.Join(dir, "late.yaml"), []byte("name: late\ndescription: Added later.\nargv: [/bin/echo, late]\n"), 0o644)
	s.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(20 * time.Second); !slices.Contains(s.tools().names(), "late"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload the tools directory")
		}
	}
}

// With tools.replace_builtins a file may replace a built-in.
func TestToolsDirectoryReplacesBuiltin(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "calculator.yaml"), []byte("name: calculator\ndescription: A fake calculator.\ninput_schema: {type: object, properties: {expression: {type: string}}}\nargv: [/bin/echo, fake]\n"), 0o644)
	s := startServer(t, "tools_dir: "+dir+"\ntools: {replace_builtins: [calculator]}\n")
	j := s.run("", "calculator", map[string]any{"expression": "1+1"})
	if strings.TrimSpace(j.Result.Content) != "fake" {
		t.Errorf("calculator: %+v", j.Result)
	}
}

// A provider's tools are listed (effects from the config, narrowed by the
// server's hints) and called; killed in the middle of a call, the provider
// is restarted: a call that may have written is answered with the failure
// and not run again, a read-only one is run again on the new server, and
// the state shows in GET /v1/tools and /metrics.
func TestProviderLifecycle(t *testing.T) {
	s, _ := turnsServer(t, "")
	l := s.tools()
	effects := map[string][]string{}
	for _, tl := range l.Tools {
		if strings.HasPrefix(tl.Name, "mcp__") {
			effects[tl.Name] = tl.Effects
			if tl.Source != "provider:mcp" || !tl.Available {
				t.Errorf("%s: %+v", tl.Name, tl)
			}
		}
	}
	if len(effects) != 10 || !slices.Equal(effects["mcp__echo"], []string{"file_read"}) || !slices.Equal(effects["mcp__note"], []string{"exec", "file_read"}) {
		t.Fatalf("provider tools %v", effects)
	}
	code, tv, raw := s.postTurn("", "", `[`+chatCall("p1", "mcp__echo", `{"text":"hello"}`)+","+chatCall("p2", "mcp__fail", `{}`)+","+chatCall("p3", "mcp__image", `{}`)+`]`)
	if code != 200 || tv.Calls[0].Content != "hello" || !tv.Calls[1].IsError || tv.Calls[1].Content != "Error: this tool always fails" ||
		len(tv.Calls[2].Artifacts) != 1 || tv.Calls[2].Artifacts[0].MimeType != "image/png" {
		t.Fatalf("calls: %d %s", code, raw)
	}

	root := s.cmd.Process.Pid
	isServer := func(cl string) bool { return strings.HasPrefix(cl, "/workspace/mcp-testserver") }
	_, who1, _ := s.postTurn("", "", `[`+chatCall("w1", "mcp__whoami", `{}`)+`]`)

	// Deterministic kills: during note (exec, file_read: not retry-safe)
	// and during sleep (read-only: retried on the new server).
	for _, tc := range []struct {
		tool, args string
		retried    bool
	}{
		{"mcp__note", `{"text":"x"}`, false},
		{"mcp__sleep", `{"ms": 3000}`, true},
	} {
		pid := waitProc(t, root, isServer)
		done := make(chan turnView, 1)
		go func() {
			_, tv, _ := s.postTurn("", "", `[`+chatCall("x", tc.tool, tc.args)+`]`)
			done <- tv
		}()
		if tc.tool == "mcp__note" {
			// note answers at once: kill the server before it can, by
			// stopping it first (SIGSTOP), then killing it once the call
			// is in flight.
			syscall.Kill(pid, syscall.SIGSTOP)
			time.Sleep(500 * time.Millisecond)
		} else {
			time.Sleep(500 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		tv := <-done
		c := tv.Calls[0]
		switch {
		case tc.retried && (!c.OK || c.Attempts != 2 || c.Content != "slept 3000 ms"):
			t.Errorf("%s killed: %+v", tc.tool, c)
		case !tc.retried && (c.OK || c.Attempts != 1 || !strings.Contains(c.Content, "provider mcp died during the call") ||
			!strings.Contains(c.Content, "not retried")):
			t.Errorf("%s killed: %+v", tc.tool, c)
		}
		waitProviderReady(t, s, "mcp")
	}
	if err := waitMetric(s.MetricsURL, `sandboxd_provider_restarts_total{provider="mcp"}`, func(v float64) bool { return v == 2 }); err != nil {
		t.Error(err)
	}
	_, who2, _ := s.postTurn("", "", `[`+chatCall("w2", "mcp__whoami", `{}`)+`]`)
	if who1.Calls[0].Content == who2.Calls[0].Content || !strings.HasPrefix(who2.Calls[0].Content, "pid ") {
		t.Errorf("not a new server: %q then %q", who1.Calls[0].Content, who2.Calls[0].Content)
	}
	for _, src := range s.tools().Sources {
		if src.Name == "mcp" && (src.State != "ready" || src.Restarts != 2) {
			t.Errorf("provider state %+v", src)
		}
	}
	if !strings.Contains(string(s.metricsBody()), `sandboxd_provider_state{provider="mcp",state="ready"} 1`) {
		t.Error("provider state not in /metrics")
	}
}

func (s *server) metricsBody() []byte { return s.getMetrics() }

// A stdio provider with the http effect reaches the network only through
// the egress proxy, under its own allowlist: an allowed server answers, a
// server off the list is refused.
func TestProviderEgress(t *testing.T) {
	okPort, stop1 := serveText(t, "hello-provider")
	defer stop1()
	offPort, stop2 := serveText(t, "should-not-be-read")
	defer stop2()
	s := startServer(t, fmt.Sprintf(`providers:
  - name: web
    command: [/workspace/mcp-testserver]
    workspace: %s
    effects: [exec, file_read, http]
    start: boot
    egress:
      allow:
        - host: 127.0.0.1
          ports: [%d]
      allow_private_cidrs: [127.0.0.1/32]
`, providerDir(t), okPort))
	waitProviderReady(t, s, "web")
	code, tv, raw := s.postTurn("", "", fmt.Sprintf(`[%s,%s]`,
		chatCall("a", "web__fetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%d/"}`, okPort)),
		chatCall("b", "web__fetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%d/"}`, offPort))))
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if c := tv.Calls[0]; c.Content != "200 hello-provider" {
		t.Errorf("allowed: %+v", c)
	}
	if c := tv.Calls[1]; !strings.HasPrefix(c.Content, "403 egress denied") {
		t.Errorf("off the allowlist: %+v", c)
	}
	if !strings.Contains(string(s.metricsBody()), `sandboxd_egress_requests_total{decision="denied",tenant="provider:web"} 1`) {
		t.Errorf("the denial is not counted under the provider's scope")
	}
}

func serveText(t *testing.T, body string) (int, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(l)
	return l.Addr().(*net.TCPAddr).Port, func() { srv.Close() }
}

// A stdio provider on every runner: on the container runners the agent
// streams its stdin and runs it without a wall-clock limit. Killed, it
// comes back (where the host sees the sandbox's processes: not under
// gVisor, whose processes live inside its own kernel).
func TestProviderOnEveryRunner(t *testing.T) {
	for _, rc := range []struct{ name, config string }{
		{"local", ""},
		{"docker", runtimeConfig("docker", "")},
		{"docker-runsc", runtimeConfig("docker", "runsc")},
		{"containerd", runtimeConfig("containerd", "")},
		{"containerd-runsc", runtimeConfig("containerd", "runsc")},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if strings.HasPrefix(rc.name, "docker") {
				needDocker(t)
			}
			ws := providerDir(t)
			s := startServer(t, rc.config+fmt.Sprintf(`
providers:
  - name: mcp
    command: [/workspace/mcp-testserver]
    workspace: %s
    effects: [exec, file_read]
    start: boot
    restart_backoff: 200ms
    start_timeout: 60s
    tools:
      barrier: {parallel_safe: true}
      sleep: {parallel_safe: true}
`, ws))
			waitProviderReady(t, s, "mcp")
			body := `[` + chatCall("a", "mcp__barrier", `{"n":2,"timeout_ms":20000}`) + "," +
				chatCall("b", "mcp__barrier", `{"n":2,"timeout_ms":20000}`) + "," + chatCall("c", "mcp__sleep", `{"ms":1500}`) + `]`
			code, tv, raw := s.postTurn("", "", body)
			if code != 200 || tv.Calls[0].Content != "met" || tv.Calls[1].Content != "met" || tv.Calls[2].Content != "slept 1500 ms" {
				t.Fatalf("%d %s", code, raw)
			}
			if strings.HasSuffix(rc.name, "runsc") {
				return
			}
			_, who1, _ := s.postTurn("", "", `[`+chatCall("w", "mcp__whoami", `{}`)+`]`)
			pid := serverWithWorkspace(ws)
			if pid == 0 {
				t.Fatal("the provider's process is not visible on the host")
			}
			syscall.Kill(pid, syscall.SIGKILL)
			if err := waitMetric(s.MetricsURL, `sandboxd_provider_restarts_total{provider="mcp"}`, func(v float64) bool { return v >= 1 }); err != nil {
				t.Fatal(err)
			}
			waitProviderReady(t, s, "mcp")
			_, who2, _ := s.postTurn("", "", `[`+chatCall("w", "mcp__whoami", `{}`)+`]`)
			if who1.Calls[0].Content == who2.Calls[0].Content || !who2.Calls[0].OK {
				t.Errorf("not restarted: %q then %q", who1.Calls[0].Content, who2.Calls[0].Content)
			}
		})
	}
}

// serverWithWorkspace finds the MCP test server whose /workspace is ws
// (this test's own: its mount table names the directory).
func serverWithWorkspace(ws string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cl), "/workspace/mcp-testserver") {
			continue
		}
		mi, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if strings.Contains(string(mi), filepath.Base(filepath.Dir(ws))) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			return pid
		}
	}
	return 0
}
