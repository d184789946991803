package mcpserver

import (
	"context"
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
