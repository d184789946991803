package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/config"
)

// stdioMCP asks serve to serve one MCP session on stdin/stdout and to stop
// when the client closes stdin (`sandboxd mcp` without --url).
type stdioMCP struct {
	tenant string
	in     io.ReadCloser
	out    io.WriteCloser
}

type stdioMCPKey struct{}

func withStdioMCP(ctx context.Context, s *stdioMCP) context.Context {
	return context.WithValue(ctx, stdioMCPKey{}, s)
}

func stdioMCPFrom(ctx context.Context) *stdioMCP {
	s, _ := ctx.Value(stdioMCPKey{}).(*stdioMCP)
	return s
}

const mcpUsage = `Usage: sandboxd mcp [--url URL --api-key KEY] [--config FILE] [--data-dir DIR] [--tenant T]

Serves sandboxd's tools over MCP on stdin/stdout (newline-delimited JSON-RPC),
for MCP hosts that start their servers as processes.

With --url (default $SANDBOXD_URL) it relays the session to a running sandboxd's
/mcp endpoint with --api-key (default $SANDBOXD_API_KEY): the calls run there,
as that key's tenant. Without, it runs sandboxd in-process on the embedded
configuration (--config / $SANDBOXD_CONFIG, --data-dir; its HTTP API on a free
loopback port) as --tenant (default "default") and stops when stdin closes.
Logs go to stderr.

Flags:
`

// cmdMCP is `sandboxd mcp`.
func cmdMCP(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var url, key, cfgPath, dataDir, tenant, level string
	fs.StringVar(&url, "url", e.getenv("SANDBOXD_URL"), "relay to the sandboxd at this URL (env SANDBOXD_URL); empty: serve in-process")
	fs.StringVar(&key, "api-key", e.getenv("SANDBOXD_API_KEY"), "API key for --url (env SANDBOXD_API_KEY)")
	fs.StringVar(&cfgPath, "config", "", "in-process: YAML config file (env SANDBOXD_CONFIG)")
	fs.StringVar(&dataDir, "data-dir", "", "in-process: the data directory")
	fs.StringVar(&tenant, "tenant", config.DefaultTenant, "in-process: the tenant the session's calls run as")
	fs.StringVar(&level, "log-level", "", "in-process: debug, info, warn or error (stderr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), mcpUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "sandboxd mcp: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if url != "" {
		if err := relayMCP(ctx, strings.TrimRight(url, "/")+"/mcp", key, e.stdin, e.stdout); err != nil {
			fmt.Fprintf(e.stderr, "sandboxd mcp: %v\n", err)
			return exitUnreachable
		}
		return exitOK
	}
	// Both on free loopback ports (they must differ as written).
	set := map[string]string{"addr": "127.0.0.1:0", "metrics-addr": "localhost:0"}
	if dataDir != "" {
		set["data-dir"] = dataDir
	}
	if level != "" {
		set["log-level"] = level
	}
	cfg, err := loadConfig(serveFlags{Config: cfgPath, Set: set}, e.getenv, e.euid)
	if err != nil {
		fmt.Fprintf(e.stderr, "sandboxd mcp: %v\n", err)
		return exitUsage
	}
	log := newLogger(e.stderr, cfg.LogLevel)
	ctx = withStdioMCP(ctx, &stdioMCP{tenant: tenant, in: io.NopCloser(e.stdin), out: nopWriteCloser{e.stdout}})
	if err := e.serve(ctx, cfg, log); err != nil {
		log.Error("sandboxd stopped", "err", err)
		return exitToolFailed
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// relayMCP relays newline-delimited JSON-RPC between in/out and a
// Streamable HTTP endpoint: every message read is POSTed (with the session
// ID and protocol version the server gave), and each answer (JSON, or the
// messages of an SSE stream: progress, then the response) is written to
// out as one line. Requests are relayed concurrently, so a
// notifications/cancelled reaches the server while its call runs. At EOF
// on in, the session is deleted.
func relayMCP(ctx context.Context, endpoint, key string, in io.Reader, out io.Writer) error {
	r := &relay{endpoint: endpoint, key: key, out: out, hc: &http.Client{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	first := true
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		msg := bytes.Clone(line)
		if first || !isRequest(msg) {
			// The initialize request goes alone (its answer carries the
			// session ID every later message needs), and notifications
			// in order (notifications/initialized before any request).
			first = false
			if err := r.post(ctx, msg); err != nil {
				return err
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.post(ctx, msg); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}()
		select {
		case err := <-errc:
			return err
		default:
		}
	}
	wg.Wait()
	r.deleteSession()
	select {
	case err := <-errc:
		return err
	default:
	}
	return sc.Err()
}

type relay struct {
	endpoint, key string
	hc            *http.Client

	mu       sync.Mutex // guards session, version
	session  string
	version  string
	outMu    sync.Mutex
	out      io.Writer
	deletion sync.Once
}

func (r *relay) headers(req *http.Request) {
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	if r.version != "" {
		req.Header.Set("Mcp-Protocol-Version", r.version)
	}
}

// write writes one message as one line (compacted: stdio frames are
// lines); what is not JSON is dropped.
func (r *relay) write(msg []byte) {
	var b bytes.Buffer
	if json.Compact(&b, msg) != nil {
		return
	}
	b.WriteByte('\n')
	r.outMu.Lock()
	defer r.outMu.Unlock()
	_, _ = r.out.Write(b.Bytes())
}

// post sends one message and relays what the server answers.
func (r *relay) post(ctx context.Context, msg []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(msg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	r.headers(req)
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		r.mu.Lock()
		r.session = id
		r.mu.Unlock()
	}
	if resp.StatusCode == http.StatusAccepted {
		return nil
	}
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("%s: %s %s", r.endpoint, resp.Status, strings.TrimSpace(string(body)))
		}
		// Answer the request with a JSON-RPC error, so the client is not
		// left waiting.
		r.answerError(msg, fmt.Sprintf("sandboxd answered %s: %s", resp.Status, strings.TrimSpace(string(body))))
		return nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "text/event-stream":
		return r.relaySSE(resp.Body)
	default:
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			r.note(body)
			r.write(body)
		}
		return nil
	}
}

// relaySSE writes the data of every event of an SSE stream.
func (r *relay) relaySSE(body io.Reader) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				r.note(data)
				r.write(data)
				data = nil
			}
		case strings.HasPrefix(line, "data:"):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
	if len(data) > 0 {
		r.note(data)
		r.write(data)
	}
	return sc.Err()
}

// note remembers the protocol version of the initialize answer.
func (r *relay) note(msg []byte) {
	var m struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(msg, &m) == nil && m.Result.ProtocolVersion != "" {
		r.mu.Lock()
		r.version = m.Result.ProtocolVersion
		r.mu.Unlock()
	}
}

func (r *relay) answerError(msg []byte, text string) {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &m) != nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return // a notification: nobody waits for an answer
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID,
		"error": map[string]any{"code": -32603, "message": text}})
	r.write(b)
}

// deleteSession ends the MCP session on the server (DELETE), once.
func (r *relay) deleteSession() {
	r.deletion.Do(func() {
		r.mu.Lock()
		id := r.session
		r.mu.Unlock()
		if id == "" {
			return
		}
		req, err := http.NewRequest(http.MethodDelete, r.endpoint, nil)
		if err != nil {
			return
		}
		r.headers(req)
		if resp, err := r.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	})
}

// isRequest: the message has an id and a method (a notification has no
// id; a response to a server's request has no method).
func isRequest(msg []byte) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && len(m.ID) > 0 && string(m.ID) != "null" && m.Method != ""
}
