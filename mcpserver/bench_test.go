package mcpserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// BenchmarkStreamableCall: one tools/call over Streamable HTTP on
// loopback against a job service that answers at once: the MCP layer's
// own cost (transport, SDK, this package) per call.
func BenchmarkStreamableCall(b *testing.B) {
	f := newFakeB(b)
	f.answer = func(job.SubmitRequest) (*job.Job, error) {
		return &job.Job{State: job.StateSucceeded, Result: &tools.Result{OK: true, Content: "2"}}, nil
	}
	srv := httptest.NewServer(New(f, Options{}).HandlerFor("acme"))
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "b", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "calc", Arguments: map[string]any{"x": 1}}); err != nil || r.IsError {
			b.Fatal(err, r)
		}
	}
}

// BenchmarkStreamableCallRaw: the same call POSTed as plain JSON-RPC (the
// session made once with the SDK's client): the server side alone.
func BenchmarkStreamableCallRaw(b *testing.B) {
	f := newFakeB(b)
	f.answer = func(job.SubmitRequest) (*job.Job, error) {
		return &job.Job{State: job.StateSucceeded, Result: &tools.Result{OK: true, Content: "2"}}, nil
	}
	srv := httptest.NewServer(New(f, Options{}).HandlerFor("acme"))
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "b", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	hc := srv.Client()
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"calc","arguments":{"x":1}}}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(out, []byte(`"2"`)) {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
}
