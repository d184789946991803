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
	"time"

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
		if err := relayMCP(ctx, strings.TrimRight(url, "/")+"/mcp", key, e.stdin, e.stdout, func(f string, a ...any) { fmt.Fprintf(e.stderr, "sandboxd mcp: "+f+"\n", a...) }); err != nil {
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
// notifications/cancelled reaches the server while its call runs. Once the
// client has sent notifications/initialized, the relay opens the session's
// standalone GET stream (and waits until the server has taken it, so that
// nothing the server sends after is lost) and writes what comes on it too:
// what the server sends outside any request, such as
// notifications/resources/list_changed after a call made an artifact, and
// its own requests, whose answers the client writes on in like any other
// message. The stream is opened again when it ends while the session lasts.
// At EOF on in, the stream is closed and the session deleted. logf (may be
// nil) gets what the client cannot be told.
func relayMCP(ctx context.Context, endpoint, key string, in io.Reader, out io.Writer, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &relay{endpoint: endpoint, key: key, out: out, hc: &http.Client{}, logf: logf}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		msg := bytes.Clone(line)
		if !isRequest(msg) || isHandshake(msg) {
			// The handshake goes alone (initialize's answer carries the
			// session ID every later message needs; a client may probe
			// with server/discover first), and notifications and the
			// answers to the server's requests in order
			// (notifications/initialized before any request).
			if err := r.post(ctx, msg); err != nil {
				return err
			}
			if isInitialized(msg) {
				r.listen(ctx)
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
	r.stopListening()
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
	logf     func(string, ...any)

	listening  sync.Once
	stopListen context.CancelFunc // ends the GET stream
	listenDone chan struct{}      // closed when its goroutine has returned
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
	if v := metaVersion(msg); v != "" {
		// The stateless protocol's messages name their version; the
		// header must say the same.
		req.Header.Set("Mcp-Protocol-Version", v)
	}
	if v := req.Header.Get("Mcp-Protocol-Version"); v >= "2026-07-28" {
		// From that version a request names its method (and what it
		// calls, reads or gets) in headers too.
		method, name := methodAndName(msg)
		if method != "" {
			req.Header.Set("Mcp-Method", method)
		}
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
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
		if answersRequest(body, msg) {
			// The server's own JSON-RPC error (an unsupported protocol
			// version with the ones it supports, a bad header): as it is.
			r.write(body)
			return nil
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
	_, err := r.relayEvents(body)
	return err
}

// relayEvents writes the data of every event of an SSE stream and returns
// the last event ID it carried ("" when none did).
func (r *relay) relayEvents(body io.Reader) (lastID string, err error) {
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
		case strings.HasPrefix(line, "id:"):
			lastID = strings.TrimPrefix(strings.TrimPrefix(line, "id:"), " ")
		}
	}
	if len(data) > 0 {
		r.note(data)
		r.write(data)
	}
	return lastID, sc.Err()
}

// listen opens the session's standalone GET stream, once, and returns
// when the server has answered it (or after 10 s): the SDK's server drops
// a message it sends outside a request while no such stream is open, so
// the relay reads no more of the client's messages until it is.
func (r *relay) listen(ctx context.Context) {
	r.listening.Do(func() {
		r.mu.Lock()
		has := r.session != ""
		r.mu.Unlock()
		if !has {
			return // a server without sessions: no stream to open
		}
		lctx, cancel := context.WithCancel(ctx)
		r.stopListen, r.listenDone = cancel, make(chan struct{})
		ready := make(chan struct{})
		go func() {
			defer close(r.listenDone)
			r.stream(lctx, ready)
		}()
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			r.logf("the server did not answer the request for its stream (GET %s) in 10s; going on without waiting", r.endpoint)
		}
	})
}

// stopListening closes the GET stream, if open, and waits for its
// goroutine.
func (r *relay) stopListening() {
	r.listening.Do(func() {}) // no stream opened after this
	if r.stopListen != nil {
		r.stopListen()
		<-r.listenDone
	}
}

// stream holds the GET stream open for as long as ctx lasts, writing what
// comes on it, and opens it again when it ends (a server may close it at
// any time; with the last event ID it gave, when it gave one, so that a
// server keeping them replays what was missed). ready is closed once the
// first answer came. A server that answers with a client error (405: it
// offers no stream; 404: the session is gone) is not asked again.
func (r *relay) stream(ctx context.Context, ready chan struct{}) {
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	lastID := ""
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint, nil)
		if err != nil {
			r.logf("stream: %v", err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		r.headers(req)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := r.hc.Do(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			once()
			backoff = 100 * time.Millisecond
			id, _ := r.relayEvents(resp.Body)
			resp.Body.Close()
			if id != "" {
				lastID = id
			}
		} else if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode/100 == 4 {
				once()
				if resp.StatusCode != http.StatusNotFound || ctx.Err() == nil {
					r.logf("no stream of the server's own messages (notifications such as resources/list_changed will not reach the client): GET %s: %s %s",
						r.endpoint, resp.Status, strings.TrimSpace(string(body)))
				}
				return
			}
		} else if ctx.Err() == nil {
			r.logf("stream: %v (retrying)", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
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

// answersRequest: body is one JSON-RPC error answering msg (the same id).
func answersRequest(body, msg []byte) bool {
	var a, m struct {
		ID    json.RawMessage `json:"id"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &a) != nil || json.Unmarshal(msg, &m) != nil || len(a.Error) == 0 || len(m.ID) == 0 {
		return false
	}
	var x, y bytes.Buffer
	return json.Compact(&x, a.ID) == nil && json.Compact(&y, m.ID) == nil && x.String() != "null" && x.String() == y.String()
}

// metaVersion is the protocol version a message names in its
// params._meta (the stateless protocol's), "" when none.
func metaVersion(msg []byte) string {
	var m struct {
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return ""
	}
	v, _ := m.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string)
	return v
}

// methodAndName are a request's method and the tool, prompt (name) or
// resource (uri) it names.
func methodAndName(msg []byte) (method, name string) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || len(m.ID) == 0 {
		return "", ""
	}
	switch m.Method {
	case "tools/call", "prompts/get":
		name = m.Params.Name
	case "resources/read":
		name = m.Params.URI
	}
	return m.Method, name
}

// isHandshake: the message is the client's initialize (or its
// server/discover probe of the stateless protocol).
func isHandshake(msg []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && (m.Method == "initialize" || m.Method == "server/discover")
}

// isInitialized: the message is the client's notifications/initialized.
func isInitialized(msg []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Method == "notifications/initialized"
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
