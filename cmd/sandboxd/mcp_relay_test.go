package main

// The relay must pass on every message a server sends, including those of
// features the protocol deprecates but still carries (logging, roots:
// SEP-2577's window of at least twelve months); they are the SDK's ready
// ways to send a notification and a request outside a call.
//lint:file-ignore SA1019 the test sends deprecated-but-live messages through the relay on purpose

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// relayed connects an SDK client to endpoint through relayMCP over pipes
// (what an MCP host sees of `sandboxd mcp --url`); done is closed when the
// relay has returned.
func relayed(t *testing.T, endpoint string, opts *mcp.ClientOptions, setup func(*mcp.Client)) (cs *mcp.ClientSession, done chan error) {
	t.Helper()
	inR, inW := io.Pipe()   // client -> relay
	outR, outW := io.Pipe() // relay -> client
	done = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		err := relayMCP(ctx, endpoint, "k", inR, outW, t.Logf)
		outW.Close()
		done <- err
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "relay-test", Version: "1"}, opts)
	if setup != nil {
		setup(c)
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, done
}

// TestRelayForwardsServerMessages: every message the server sends reaches
// the stdio client through the relay, and the client's answers to the
// server's requests reach the server: progress and a server->client request
// (roots/list) on a call's own stream, and on the standalone GET stream
// (messages made outside any request) resources and tools list_changed, a
// log message and a roots/list request. At the end of input the relay
// closes its GET stream and deletes the session.
func TestRelayForwardsServerMessages(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true},
			Logging:   &mcp.LoggingCapabilities{},
		},
	})
	later := make(chan string, 1) // the roots the server asked for outside a request
	srv.AddTool(&mcp.Tool{Name: "work", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "half"})
			}
			roots, err := req.Session.ListRoots(ctx, nil) // on this call's stream
			if err != nil {
				return nil, err
			}
			// Outside the request: the standalone stream.
			srv.AddResource(&mcp.Resource{URI: "test://r", Name: "r", MIMEType: "text/plain"},
				func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://r", Text: "R"}}}, nil
				})
			srv.AddTool(&mcp.Tool{Name: "added", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{}, nil
				})
			ss := req.Session
			go func() {
				time.Sleep(50 * time.Millisecond)
				_ = ss.Log(context.Background(), &mcp.LoggingMessageParams{Level: "info", Data: "from the side"})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				r, err := ss.ListRoots(ctx, nil)
				if err != nil {
					later <- "error: " + err.Error()
					return
				}
				later <- r.Roots[0].URI
			}()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: roots.Roots[0].URI}}}, nil
		})
	var mu sync.Mutex
	methods := map[string]int{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods[r.Method]++
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()

	progress := make(chan string, 4)
	resources, toolsChanged := make(chan struct{}, 4), make(chan struct{}, 4)
	logs := make(chan any, 4)
	cs, done := relayed(t, hs.URL, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params.Message
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resources <- struct{}{} },
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { toolsChanged <- struct{}{} },
		LoggingMessageHandler:      func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params.Data },
	}, func(c *mcp.Client) { c.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"}) })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	p := &mcp.CallToolParams{Name: "work"}
	p.SetProgressToken("t1")
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "file:///work" {
		t.Fatalf("the roots the server asked for within the call: %q", got)
	}
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s reached the stdio client", what)
		}
	}
	select {
	case m := <-progress:
		if m != "half" {
			t.Fatalf("progress %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no progress notification")
	}
	wait("notifications/resources/list_changed", resources)
	wait("notifications/tools/list_changed", toolsChanged)
	select {
	case d := <-logs:
		if d != "from the side" {
			t.Fatalf("log message %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/message")
	}
	select {
	case got := <-later:
		if got != "file:///work" {
			t.Fatalf("the server's roots/list outside a request: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server's roots/list outside a request was not answered")
	}
	if lr, err := cs.ListResources(ctx, nil); err != nil || len(lr.Resources) != 1 {
		t.Fatalf("resources/list: %v %+v", err, lr)
	}
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not end at the end of its input")
	}
	mu.Lock()
	defer mu.Unlock()
	if methods["GET"] != 1 || methods["DELETE"] != 1 {
		t.Fatalf("requests by method %v: want one GET stream and one DELETE", methods)
	}
}

// TestRelayWithoutStream: a server that offers no GET stream (405) still
// relays requests and answers; the relay says so on its log once.
func TestRelayWithoutStream(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var gets int
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets++
			http.Error(w, "no stream", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	cs, done := relayed(t, hs.URL, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo"})
	if err != nil || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "hi") {
		t.Fatalf("call without a stream: %v %+v", err, res)
	}
	cs.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if gets != 1 {
		t.Fatalf("%d GETs after a 405, want 1 (no retry)", gets)
	}
}

// TestRelayPassesServerErrors: the stateless protocol's server/discover
// probe goes with the headers its version requires (Mcp-Protocol-Version
// from its _meta, Mcp-Method), so the server answers it; a JSON-RPC error
// the server answers with a non-2xx status (a probe without its client
// capabilities: 400) reaches the client as it is, not as a relay error;
// other failures become a JSON-RPC error naming the status.
func TestRelayPassesServerErrors(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	defer hs.Close()
	in := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}` + "\n"
	var out strings.Builder
	if err := relayMCP(context.Background(), hs.URL, "", strings.NewReader(in), &out, t.Logf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"id":1,"result"`) || !strings.Contains(lines[0], "supportedVersions") ||
		!strings.Contains(lines[1], `"id":2,"error":{"code":-32602,"message":"missing or invalid _meta field`) {
		t.Fatalf("server/discover relayed: %s", out.String())
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusBadGateway)
	}))
	defer bad.Close()
	out.Reset()
	if err := relayMCP(context.Background(), bad.URL, "", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`+"\n"), &out, t.Logf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"id":2`) || !strings.Contains(out.String(), "502 Bad Gateway: boom") {
		t.Fatalf("a proxy's failure: %s", out.String())
	}
}
