//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCPOverhead runs a warm python_repl call ({"code": "1+1"}) side
// by side in one run, on one server, alternating call by call:
//
//	jobs:  POST /v1/jobs?wait=true with session_id (a session made first)
//	mcp:   tools/call through MCP over Streamable HTTP (the MCP session's
//	       sandboxd session, made by the warm-up call)
//
// and reports each one's p50-ms and p99-ms, and mcp-minus-jobs-p50-ms: the
// goal is at most 0.5 ms.
func BenchmarkMCPOverhead(b *testing.B) {
	s := startServer(b, "tenants:\n  - name: acme\n    api_keys: [k-acme]\n")
	hc := &http.Client{}
	var ses struct {
		ID string `json:"id"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "k-acme", map[string]any{}, &ses); resp.StatusCode != 201 {
		b.Fatalf("session: %d %s", resp.StatusCode, data)
	}
	jobs := func() error {
		body, _ := json.Marshal(map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": "1+1"}, "session_id": ses.ID})
		req, _ := http.NewRequest("POST", s.URL+"/v1/jobs?wait=true", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k-acme")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var j jobView
		if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
			return err
		}
		if resp.StatusCode != 200 || j.Result == nil || !strings.Contains(j.Result.Content, "2") {
			return fmt.Errorf("jobs: %d %+v", resp.StatusCode, j.Result)
		}
		return nil
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: keyTransport{"k-acme"}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	viaMCP := func() error {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "python_repl", Arguments: map[string]any{"code": "1+1"}})
		if err != nil {
			return err
		}
		if r.IsError || len(r.Content) == 0 || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "2") {
			return fmt.Errorf("mcp: %+v", r)
		}
		return nil
	}
	for _, fn := range []func() error{jobs, viaMCP, jobs, viaMCP} { // warm both sessions
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	var dj, dm []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, fn := range []func() error{jobs, viaMCP} {
			if i%2 == 1 { // alternate which goes first
				k, fn = 1-k, []func() error{jobs, viaMCP}[1-k]
			}
			t0 := time.Now()
			if err := fn(); err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				dj = append(dj, time.Since(t0))
			} else {
				dm = append(dm, time.Since(t0))
			}
		}
	}
	b.StopTimer()
	slices.Sort(dj)
	slices.Sort(dm)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(dj[len(dj)/2]), "jobs-p50-ms")
	b.ReportMetric(ms(p99(dj)), "jobs-p99-ms")
	b.ReportMetric(ms(dm[len(dm)/2]), "mcp-p50-ms")
	b.ReportMetric(ms(p99(dm)), "mcp-p99-ms")
	b.ReportMetric(ms(dm[len(dm)/2])-ms(dj[len(dj)/2]), "mcp-minus-jobs-p50-ms")
}
