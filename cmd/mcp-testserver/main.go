// Command mcp-testserver is a small MCP server sandboxd ships for its own
// tests: it serves a few tools over stdio (the default; the way a provider
// runs inside a sandbox) or streamable HTTP (-http ADDR), built with the
// official Go SDK. Its tools:
//
//	echo {text}             the text (readOnlyHint)
//	add {a, b}              a+b (readOnlyHint)
//	sleep {ms}              sleeps, then "slept N ms" (readOnlyHint)
//	note {text}             keeps the text in memory, answers the count
//	                        (destructiveHint false: an additive write)
//	notes {}                the notes so far, one per line (readOnlyHint)
//	barrier {n, timeout_ms} waits until n calls are in flight together,
//	                        "met" or "alone" (readOnlyHint; proves concurrency)
//	fail {}                 an error result (isError)
//	whoami {}               the server's process id and start time
//	image {}                a 1x1 PNG as image content
//	fetch {url}             GETs the URL through HTTP_PROXY, the sandbox's egress
//	                        proxy (openWorldHint)
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	started = time.Now()
	mu      sync.Mutex
	notes   []string
	inBar   int
	met     = make(chan struct{})
)

func boolp(b bool) *bool { return &b }

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

type textIn struct {
	Text string `json:"text" jsonschema:"the text"`
}
type addIn struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}
type sleepIn struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep"`
}
type barrierIn struct {
	N         int `json:"n"`
	TimeoutMS int `json:"timeout_ms"`
}
type fetchIn struct {
	URL string `json:"url"`
}
type none struct{}

// A 1x1 transparent PNG.
const pngB64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

func server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-testserver", Version: "1.0.0"}, nil)
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: boolp(false)}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two numbers.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(in.A + in.B)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleep a while.", Annotations: ro},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return text(fmt.Sprintf("slept %d ms", in.MS)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "note", Description: "Keep a note.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, in.Text)
			return text(fmt.Sprintf("%d notes", len(notes))), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "notes", Description: "The notes so far.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return text(strings.Join(notes, "\n")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "barrier", Description: "Wait until n calls are in flight together.", Annotations: ro},
		func(ctx context.Context, _ *mcp.CallToolRequest, in barrierIn) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			inBar++
			ch := met
			if inBar == in.N {
				close(met)
				met = make(chan struct{}) // the next group meets anew
			}
			mu.Unlock()
			defer func() { mu.Lock(); inBar--; mu.Unlock() }()
			select {
			case <-ch:
				return text("met"), nil, nil
			case <-time.After(time.Duration(in.TimeoutMS) * time.Millisecond):
				return text("alone"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fail on purpose.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			r := text("this tool always fails")
			r.IsError = true
			return r, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "The server's process id and start time.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprintf("pid %d started %s", os.Getpid(), started.Format(time.RFC3339Nano))), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "A tiny PNG.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			data, _ := base64.StdEncoding.DecodeString(pngB64)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a 1x1 image"},
				&mcp.ImageContent{Data: data, MIMEType: "image/png"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fetch", Description: "GET a URL.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: boolp(true)}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, any, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
			if err != nil {
				return nil, nil, err
			}
			// The sandbox's only way out is its egress proxy; use it for every
			// address (Go's environment proxy skips loopback ones).
			tr := &http.Transport{}
			if p := os.Getenv("HTTP_PROXY"); p != "" {
				pu, err := url.Parse(p)
				if err != nil {
					return nil, nil, err
				}
				tr.Proxy = http.ProxyURL(pu)
			}
			resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				r := text(err.Error())
				r.IsError = true
				return r, nil, nil
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			return text(fmt.Sprintf("%d %s", resp.StatusCode, b)), nil, nil
		})
	return s
}

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	s := server()
	if *addr != "" {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
		log.Fatal(http.ListenAndServe(*addr, h))
	}
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
