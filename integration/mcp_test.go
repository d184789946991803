//go:build integration

package integration

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const mcpConfig = `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      rules:
        - tool: calculator
          action: deny
          reason: use python_repl for arithmetic
  - name: other
    api_keys: [k-other]
`

// mcpToolsConfig is mcpConfig with a tools directory holding "report", a
// script tool whose result has a CSV artifact (an MCP resource).
func mcpToolsConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"report.yaml": "name: report\ndescription: Writes a CSV report.\ninput_schema: {type: object, properties: {}}\nscript: report.sh\n",
		"report.sh":   "#!/bin/sh\nprintf '%s\\n' '{\"content\": \"see report.csv\", \"artifacts\": [{\"name\": \"report.csv\", \"mime_type\": \"text/csv\", \"text\": \"a,b\\n1,2\\n\"}]}'\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return mcpConfig + "tools_dir: " + dir + "\n"
}

// keyTransport adds an API key to every request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if k.key != "" {
		r.Header.Set("Authorization", "Bearer "+k.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpHTTP(t *testing.T, s *server, key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: keyTransport{key}}}, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestMCPHTTP: the MCP server at /mcp, the same tests as over stdio, plus
// the key check and the MCP session's sandboxd session.
func TestMCPHTTP(t *testing.T) {
	s := startServer(t, mcpToolsConfig(t))
	// No key, a bad key, an operator-less tenant's: the API's answers.
	for _, key := range []string{"", "nope"} {
		req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("key %q: %d, want 401", key, resp.StatusCode)
		}
	}
	cs := checkMCP(t, func(o *mcp.ClientOptions) *mcp.ClientSession { return mcpHTTP(t, s, "k-acme", o) })
	// The cancelled call's job was cancelled.
	var jobs struct {
		Jobs []struct {
			Tool string `json:"tool"`
		} `json:"jobs"`
	}
	s.do("GET", "/v1/jobs?state=cancelled", "k-acme", nil, &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Tool != "python_repl" {
		t.Fatalf("cancelled jobs after the MCP cancellation: %+v", jobs.Jobs)
	}

	// The MCP session is one sandboxd session of the tenant, listed by the
	// API; another tenant cannot reach the MCP session.
	var list struct {
		Sessions []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"sessions"`
	}
	s.do("GET", "/v1/sessions?state=active", "k-acme", nil, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("active sessions of acme after MCP calls: %+v", list.Sessions)
	}
	sesID := list.Sessions[0].ID
	req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer k-other")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("another tenant's request in acme's MCP session: %d, want 404", resp.StatusCode)
	}
	// Ending the MCP session closes the sandboxd session.
	cs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ses struct {
			State string `json:"state"`
		}
		s.do("GET", "/v1/sessions/"+sesID, "k-acme", nil, &ses)
		if ses.State == "closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd session %s still %q after the MCP session ended", sesID, ses.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPStdio: `sandboxd mcp` over stdio, relaying to a running daemon
// (--url) and in-process on its own data directory.
func TestMCPStdio(t *testing.T) {
	t.Run("relay", func(t *testing.T) {
		s := startServer(t, mcpToolsConfig(t))
		cmd := exec.Command(binPath, "mcp", "--url", s.URL, "--api-key", "k-acme")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		checkMCP(t, func(o *mcp.ClientOptions) *mcp.ClientSession { return mcpStdio(t, cmd, o) })
	})
	t.Run("in-process", func(t *testing.T) {
		cfg := t.TempDir() + "/sandboxd.yaml"
		if err := os.WriteFile(cfg, []byte(mcpToolsConfig(t)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binPath, "mcp", "--data-dir", dataDir(t), "--config", cfg, "--tenant", "acme")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		checkMCP(t, func(o *mcp.ClientOptions) *mcp.ClientSession { return mcpStdio(t, cmd, o) })
	})
}

func mcpStdio(t *testing.T, cmd *exec.Cmd, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("MCP over stdio: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("sandboxd mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// checkMCP: tools listed with schemas and annotations; a call; a stateful
// REPL across two calls; an image artifact; another artifact as a resource
// announced by notifications/resources/list_changed, listed and read; a
// guard refusal and a
// validation error as isError results; progress while a job runs;
// cancellation cancels the job.
func checkMCP(t *testing.T, connect func(*mcp.ClientOptions) *mcp.ClientSession) *mcp.ClientSession {
	t.Helper()
	progressed := make(chan string, 64)
	resourcesChanged := make(chan struct{}, 64)
	cs := connect(&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		select {
		case progressed <- r.Params.Message:
		default:
		}
	}, ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
		select {
		case resourcesChanged <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range lt.Tools {
		byName[tl.Name] = tl
	}
	py, calc, wr := byName["python_repl"], byName["calculator"], byName["write_file"]
	if py == nil || calc == nil || wr == nil || byName["file_info"] == nil {
		t.Fatalf("tools/list: %d tools, missing python_repl, calculator, write_file or file_info", len(lt.Tools))
	}
	if py.InputSchema == nil || py.Annotations == nil || py.Annotations.ReadOnlyHint || py.Annotations.DestructiveHint == nil ||
		py.Annotations.OpenWorldHint == nil || *py.Annotations.OpenWorldHint {
		t.Fatalf("python_repl annotations (exec: not read-only, closed world): %+v", py.Annotations)
	}
	if !calc.Annotations.ReadOnlyHint || !*wr.Annotations.DestructiveHint || byName["file_info"].OutputSchema == nil {
		t.Fatalf("annotations: calculator %+v write_file %+v; file_info output schema %v", calc.Annotations, wr.Annotations, byName["file_info"].OutputSchema)
	}
	if h := byName["http_request"]; h == nil || h.Annotations.OpenWorldHint == nil || !*h.Annotations.OpenWorldHint {
		t.Fatalf("http_request should be open-world: %+v", h)
	}

	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error %v", name, err)
		}
		return res
	}
	text := func(r *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	// A stateful REPL across two calls of one MCP session.
	if r := call("python_repl", map[string]any{"code": "acc = 40"}); r.IsError {
		t.Fatalf("python_repl: %s", text(r))
	}
	if r := call("python_repl", map[string]any{"code": "acc + 2"}); r.IsError || !strings.Contains(text(r), "42") {
		t.Fatalf("REPL state across calls: isError=%v %q", r.IsError, text(r))
	}
	// Files persist between calls of the session; structured output.
	if r := call("write_file", map[string]any{"path": "note.txt", "content": "hello"}); r.IsError {
		t.Fatalf("write_file: %s", text(r))
	}
	if r := call("file_info", map[string]any{"path": "note.txt"}); r.IsError || r.StructuredContent == nil {
		t.Fatalf("file_info: isError=%v structured=%v %q", r.IsError, r.StructuredContent, text(r))
	}
	// An image artifact is image content.
	r := call("python_repl", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"})
	var img *mcp.ImageContent
	for _, c := range r.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if r.IsError || img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Fatalf("matplotlib figure: isError=%v content=%d image=%v %q", r.IsError, len(r.Content), img != nil, text(r))
	}
	// Any other artifact is a resource: a resource_link in the result,
	// notifications/resources/list_changed, listed and read.
	r = call("report", map[string]any{})
	var link *mcp.ResourceLink
	for _, c := range r.Content {
		if rl, ok := c.(*mcp.ResourceLink); ok {
			link = rl
		}
	}
	if r.IsError || link == nil || link.Name != "report.csv" || link.MIMEType != "text/csv" {
		t.Fatalf("a CSV artifact: isError=%v link=%+v %q", r.IsError, link, text(r))
	}
	select {
	case <-resourcesChanged:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/resources/list_changed after a call made an artifact")
	}
	lr, err := cs.ListResources(ctx, nil)
	if err != nil || len(lr.Resources) != 1 || lr.Resources[0].URI != link.URI {
		t.Fatalf("resources/list after the artifact: %v %+v", err, lr)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "a,b\n1,2\n" {
		t.Fatalf("resources/read %s: %v %+v", link.URI, err, rr)
	}
	// A guard refusal and a validation error: isError with readable text.
	if r := call("calculator", map[string]any{"expression": "1+1"}); !r.IsError || !strings.Contains(text(r), "use python_repl for arithmetic") {
		t.Fatalf("guard refusal: isError=%v %q", r.IsError, text(r))
	}
	if r := call("python_repl", map[string]any{"nope": 1}); !r.IsError || !strings.Contains(text(r), "code") {
		t.Fatalf("validation error: isError=%v %q", r.IsError, text(r))
	}
	// A Python exception is the tool's error.
	if r := call("python_repl", map[string]any{"code": "1/0"}); !r.IsError || !strings.Contains(text(r), "ZeroDivisionError") {
		t.Fatalf("exception: isError=%v %q", r.IsError, text(r))
	}
	// Progress while a job runs.
	p := &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": "import time\nprint('tick', flush=True)\ntime.sleep(0.5)\n'done'"}}
	p.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("call with progress: %v %+v", err, res)
	}
	select {
	case <-progressed:
	case <-time.After(5 * time.Second):
		t.Fatal("no progress notification while the job ran")
	}
	// Cancellation (notifications/cancelled) cancels the job: the REPL is
	// interrupted and answers the next call at once, its state kept.
	cctx, ccancel := context.WithCancel(ctx)
	go func() { time.Sleep(1500 * time.Millisecond); ccancel() }()
	start := time.Now()
	_, err = cs.CallTool(cctx, &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": "import time\ntime.sleep(60)"}})
	if err == nil || time.Since(start) > 20*time.Second {
		t.Fatalf("cancelled call: err=%v after %v", err, time.Since(start))
	}
	start = time.Now()
	if r := call("python_repl", map[string]any{"code": "acc"}); r.IsError || !strings.Contains(text(r), "40") || time.Since(start) > 30*time.Second {
		t.Fatalf("after cancellation: isError=%v %q after %v", r.IsError, text(r), time.Since(start))
	}
	return cs
}

// TestMCPSessionLimits: an MCP session's sandboxd session counts against
// the tenant's session limit (a sandboxed call past it is an isError
// result naming the limit; a calculator call needs no session and runs),
// and an MCP session left idle is closed with its sandboxd session.
func TestMCPSessionLimits(t *testing.T) {
	s := startServer(t, mcpConfig+"sessions:\n  max_per_tenant: 1\n  default_idle: 4s\n  reap_interval: 1s\n")
	var rest struct {
		ID string `json:"id"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "k-other", map[string]any{"idle_timeout_seconds": 3600}, &rest); resp.StatusCode != 201 {
		t.Fatalf("session: %d %s", resp.StatusCode, data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := mcpHTTP(t, s, "k-other", nil)
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": "1"}})
	if err != nil || !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "session limit") {
		t.Fatalf("a sandboxed call past the session limit: %v %+v", err, r)
	}
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "2+2"}}); err != nil || r.IsError {
		t.Fatalf("calculator needs no session: %v %+v", err, r)
	}
	s.do("DELETE", "/v1/sessions/"+rest.ID, "k-other", nil, nil)
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": "x = 1"}}); err != nil || r.IsError {
		t.Fatalf("python_repl once the limit has room: %v %+v", err, r)
	}
	var list struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	s.do("GET", "/v1/sessions?state=active", "k-other", nil, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("active sessions: %+v", list.Sessions)
	}
	// Idle: no request for default_idle closes the MCP session and its
	// sandboxd session.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ses struct {
			State string `json:"state"`
		}
		s.do("GET", "/v1/sessions/"+list.Sessions[0].ID, "k-other", nil, &ses)
		if ses.State == "closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle MCP session's sandboxd session is still %q", ses.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
