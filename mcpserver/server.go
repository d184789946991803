// Package mcpserver serves sandboxd's tools over the Model Context Protocol
// (github.com/modelcontextprotocol/go-sdk): Streamable HTTP at /mcp (one
// handler per tenant, mounted by the API behind its key check) and stdio
// (`sandboxd mcp`).
//
// Every call goes through the job service, exactly like POST /v1/jobs:
// validation, the guard, the store, metrics, events. One MCP session is one
// sandboxd session: it is created on the first call of a tool that needs a
// sandbox or a workspace (exec, file_read, file_write), used by every later
// such call (python_repl keeps its globals, files persist), and closed when
// the MCP session ends (the client's DELETE, the transport closing, or the
// idle timeout). It counts against the tenant's session limit like any
// other.
//
// Results: the tool's text (or its error) as text content, isError when the
// job did not succeed or the tool's result is not OK (a guard refusal, a
// validation error, a timeout: all readable text, never a protocol error);
// an object output schema's tools also answer structuredContent. A PNG
// artifact is image content; any other artifact is a resource_link to
// sandboxd://jobs/{job}/artifacts/{name}, listed by resources/list and
// read with resources/read. While a job runs, a call that asked for
// progress (a progressToken) gets notifications/progress for its events
// (started, output); notifications/cancelled cancels the job.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// Backend is what the MCP server needs from the job service; *job.Service
// implements it.
type Backend interface {
	Submit(ctx context.Context, tenant string, req job.SubmitRequest) (*job.Job, bool, error)
	Wait(ctx context.Context, tenant, id string) (*job.Job, error)
	Cancel(ctx context.Context, tenant, id string) (*job.Job, error)
	Subscribe(ctx context.Context, tenant, id string) (<-chan job.Event, error)
	Artifact(ctx context.Context, tenant, jobID, name string) (*tools.Artifact, error)
	CreateSession(ctx context.Context, tenant string, req job.SessionRequest) (*job.Session, error)
	CloseSession(ctx context.Context, tenant, id string) (*job.Session, error)
	Registry() *tools.Registry
}

// Options configures the server. Zero fields take defaults.
type Options struct {
	// Version is the server's version in the initialize answer.
	Version string
	// IdleTimeout closes an MCP session over HTTP (and its sandboxd
	// session) that received no request for this long; default 10m.
	IdleTimeout time.Duration
	// Logger receives the SDK's and the server's logs; nil discards them.
	Logger *slog.Logger
}

// Server builds one mcp.Server per MCP session (its tools from the
// registry as it is when the session starts, its resources the session's
// artifacts).
type Server struct {
	b      Backend
	opts   Options
	log    *slog.Logger
	sdkLog *slog.Logger // the SDK's: warnings and errors only

	mu       sync.Mutex
	handlers map[string]http.Handler // by tenant
	ending   int                     // sandboxd sessions being closed (end)
	ended    *sync.Cond              // on mu: ending went down
}

// New returns a server over b.
func New(b Backend, opts Options) *Server {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := &Server{b: b, opts: opts, log: opts.Logger, sdkLog: slog.New(warnAndAbove{opts.Logger.Handler()}),
		handlers: map[string]http.Handler{}}
	srv.ended = sync.NewCond(&srv.mu)
	return srv
}

// Wait returns when no MCP session's sandboxd session is being closed
// (the daemon calls it before it exits, so that a close begun as an MCP
// session ended finishes: its sandbox and workspace released).
func (s *Server) Wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.ending > 0 {
		s.ended.Wait()
	}
}

// warnAndAbove keeps the SDK's warnings and errors (its info lines, a
// session connected or disconnected, would repeat the access log).
type warnAndAbove struct{ slog.Handler }

func (w warnAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}
func (w warnAndAbove) WithAttrs(a []slog.Attr) slog.Handler {
	return warnAndAbove{w.Handler.WithAttrs(a)}
}
func (w warnAndAbove) WithGroup(n string) slog.Handler { return warnAndAbove{w.Handler.WithGroup(n)} }

// HandlerFor is the Streamable HTTP handler of one tenant's MCP sessions.
// Each tenant has its own, so a session ID is only found with a key of the
// tenant that created it (another tenant's request for it is 404).
func (s *Server) HandlerFor(tenant string) http.Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handlers[tenant]
	if h == nil {
		h = s.newHandler(tenant)
		s.handlers[tenant] = h
	}
	return h
}

// newServerKey carries, in a request's context, the mcp.Server made for
// the session that request may start.
type newServerKey struct{}

// newHandler is one tenant's Streamable HTTP handler. The SDK asks for a
// server on every request (ServeHTTP reads the protocol versions it
// supports from one) but uses it only for a request that starts a session,
// one without an Mcp-Session-Id. Making a server (every tool added, each
// schema re-marshalled and checked by the SDK) cost most of the MCP
// layer's time per call, so a per-session server is made only for such a
// request, once (the SDK asks twice), and a request of an existing session
// gets a shared one, made once, whose only use is its protocol versions.
func (s *Server) newHandler(tenant string) http.Handler {
	var (
		once  sync.Once
		proto *mcp.Server
	)
	sdk := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if srv, ok := r.Context().Value(newServerKey{}).(*mcp.Server); ok {
			return srv
		}
		once.Do(func() { proto = mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Version: s.opts.Version}, nil) })
		return proto
	}, &mcp.StreamableHTTPOptions{SessionTimeout: s.opts.IdleTimeout, Logger: s.sdkLog})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			r = r.WithContext(context.WithValue(r.Context(), newServerKey{}, s.newMCPServer(tenant)))
		}
		sdk.ServeHTTP(w, r)
	})
}

// ServeStdio serves one MCP session for tenant on r/w (newline-delimited
// JSON-RPC) until the client closes r or ctx ends; the session's sandboxd
// session is closed before it returns.
func (s *Server) ServeStdio(ctx context.Context, tenant string, r io.ReadCloser, w io.WriteCloser) error {
	srv := s.newMCPServer(tenant)
	err := srv.Run(ctx, &mcp.IOTransport{Reader: r, Writer: w})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// conn is the state of one MCP session.
type conn struct {
	s      *Server
	tenant string
	srv    *mcp.Server

	mu        sync.Mutex
	session   string // the sandboxd session, "" until the first sandboxed call
	watching  bool   // a goroutine closes session when the MCP session ends
	ended     bool
	resources map[string]bool // artifact URIs already added
}

func (s *Server) newMCPServer(tenant string) *mcp.Server {
	c := &conn{s: s, tenant: tenant, resources: map[string]bool{}}
	c.srv = mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Version: s.opts.Version}, &mcp.ServerOptions{
		Logger: s.sdkLog,
		// Tools and resources (artifacts) from the start, announced as
		// they change; no logging capability: this server sends no log
		// messages.
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true},
		},
		Instructions: "sandboxd runs tool calls in sandboxes. Calls of tools that run code or touch files share one " +
			"sandbox and workspace for this MCP session: python_repl keeps its globals, files persist between calls.",
	})
	for _, t := range s.b.Registry().Tools() {
		mt, ok := ToolOf(t)
		if !ok {
			s.log.Warn("tool left out of MCP: its input schema is not an object schema", "tool", t.Name)
			continue
		}
		tool, structured := t, mt.OutputSchema != nil
		c.srv.AddTool(mt, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c.watch(req.Session)
			return c.call(ctx, req, tool, structured), nil
		})
	}
	return c.srv
}

// ToolOf is t as an MCP tools/list entry: name, description, input
// schema, output schema when it describes objects, and the annotations of
// its effects (tools.AnnotationsOf, the one mapping). ok is false when
// the input schema is not an object schema (MCP requires one).
func ToolOf(t *tools.Tool) (*mcp.Tool, bool) {
	inSchema, outSchema := tools.MCPSchemas(t)
	var in map[string]any
	if json.Unmarshal(inSchema, &in) != nil || in["type"] != "object" {
		return nil, false
	}
	a := tools.AnnotationsOf(t.Effects, t.Idempotent)
	mt := &mcp.Tool{
		Name:        t.Name,
		Description: t.Description,
		InputSchema: inSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: a.ReadOnly, DestructiveHint: a.Destructive,
			OpenWorldHint: a.OpenWorld, IdempotentHint: a.Idempotent},
	}
	if outSchema != nil {
		mt.OutputSchema = outSchema
	}
	return mt, true
}

// needsSession: the tool runs code or touches the workspace, so its calls
// share the MCP session's sandbox. A tool with the http effect runs one-shot
// (a session's sandbox has no egress unless asked for).
func needsSession(t *tools.Tool) bool {
	if t.HasEffect(tools.EffectHTTP) {
		return false
	}
	return t.HasEffect(tools.EffectExec) || t.HasEffect(tools.EffectFileRead) || t.HasEffect(tools.EffectFileWrite)
}

// watch closes the sandboxd session when the MCP session ends (once).
func (c *conn) watch(ss *mcp.ServerSession) {
	c.mu.Lock()
	if c.watching || ss == nil {
		c.mu.Unlock()
		return
	}
	c.watching = true
	c.mu.Unlock()
	go func() {
		_ = ss.Wait()
		c.s.mu.Lock()
		c.s.ending++
		c.s.mu.Unlock()
		defer func() {
			c.s.mu.Lock()
			c.s.ending--
			c.s.ended.Broadcast()
			c.s.mu.Unlock()
		}()
		c.end()
	}()
}

// end closes the sandboxd session, if any; later calls make no new one.
func (c *conn) end() {
	c.mu.Lock()
	id := c.session
	c.session, c.ended = "", true
	c.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.s.b.CloseSession(ctx, c.tenant, id); err != nil && !errors.Is(err, job.ErrSessionNotFound) {
		c.s.log.Warn("closing the MCP session's sandboxd session", "session", id, "tenant", c.tenant, "err", err)
	} else {
		c.s.log.Debug("MCP session ended: sandboxd session closed", "session", id, "tenant", c.tenant)
	}
}

// sessionID returns the MCP session's sandboxd session, creating it on the
// first call; fresh is true when it was just created.
func (c *conn) sessionID(ctx context.Context) (id string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return "", errors.New("the MCP session has ended")
	}
	if c.session != "" {
		return c.session, nil
	}
	ses, err := c.s.b.CreateSession(ctx, c.tenant, job.SessionRequest{})
	if err != nil {
		return "", err
	}
	c.session = ses.ID
	c.s.log.Debug("MCP session: sandboxd session created", "session", ses.ID, "tenant", c.tenant)
	return ses.ID, nil
}

// forget drops a sandboxd session that ended on its own (TTL, idle
// timeout, closed by the API), so that the next call makes a new one.
func (c *conn) forget(id string) {
	c.mu.Lock()
	if c.session == id {
		c.session = ""
	}
	c.mu.Unlock()
}

// call runs one tools/call as a job and answers its result.
// structured: the tool has an object output schema (its results also
// answer structuredContent).
func (c *conn) call(ctx context.Context, req *mcp.CallToolRequest, t *tools.Tool, structured bool) *mcp.CallToolResult {
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	sreq := job.SubmitRequest{Call: tools.Call{Name: t.Name, Arguments: args}}
	note := ""
	if needsSession(t) {
		id, err := c.sessionID(ctx)
		if err != nil {
			return errorResult("no sandbox session for this MCP session: " + describe(err))
		}
		sreq.SessionID = id
	}
	j, _, err := c.s.b.Submit(ctx, c.tenant, sreq)
	if sreq.SessionID != "" && (errors.Is(err, job.ErrSessionClosed) || errors.Is(err, job.ErrSessionNotFound)) {
		// The sandboxd session ended on its own (its TTL or idle
		// timeout): a new one, and the model is told its state is gone.
		c.forget(sreq.SessionID)
		id, serr := c.sessionID(ctx)
		if serr != nil {
			return errorResult("no sandbox session for this MCP session: " + describe(serr))
		}
		sreq.SessionID = id
		note = "(The previous sandbox session had ended; this call ran in a new one: earlier variables and files are gone.)\n"
		j, _, err = c.s.b.Submit(ctx, c.tenant, sreq)
	}
	if err != nil {
		return errorResult(describe(err))
	}
	stop := c.progress(ctx, req, j.ID)
	done, werr := c.s.b.Wait(ctx, c.tenant, j.ID)
	stop()
	if werr != nil && ctx.Err() != nil {
		// notifications/cancelled (or the client went away): the job
		// is cancelled; the SDK sends no answer to a cancelled request.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := c.s.b.Cancel(cctx, c.tenant, j.ID); err != nil {
			c.s.log.Warn("cancelling the job of a cancelled MCP call", "job", j.ID, "err", err)
		}
		return errorResult("the call was cancelled")
	}
	if werr != nil {
		return errorResult(describe(werr))
	}
	return c.result(ctx, done, note, structured)
}

// progress sends notifications/progress for the job's events while it
// runs, when the request asked for them; stop ends that.
func (c *conn) progress(ctx context.Context, req *mcp.CallToolRequest, id string) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	events, err := c.s.b.Subscribe(pctx, c.tenant, id)
	if err != nil {
		cancel()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0.0
		for ev := range events {
			msg := ""
			switch ev.Type {
			case job.EventQueued:
				msg = "queued"
			case job.EventPendingApproval:
				msg = "waiting for approval"
			case job.EventStarted:
				msg = "running"
			case job.EventStdout, job.EventStderr:
				msg = string(ev.Type) + ": " + clip(ev.Data, 500)
			default:
				continue
			}
			n++
			_ = req.Session.NotifyProgress(pctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
		}
	}()
	return func() { cancel(); <-done }
}

// ArtifactURI names a job's artifact as an MCP resource.
func ArtifactURI(jobID, name string) string {
	return "sandboxd://jobs/" + url.PathEscape(jobID) + "/artifacts/" + url.PathEscape(name)
}

// parseArtifactURI is ArtifactURI's inverse.
func parseArtifactURI(uri string) (jobID, name string, ok bool) {
	rest, ok := strings.CutPrefix(uri, "sandboxd://jobs/")
	if !ok {
		return "", "", false
	}
	j, n, ok := strings.Cut(rest, "/artifacts/")
	if !ok || j == "" || n == "" || strings.Contains(n, "/") {
		return "", "", false
	}
	var err1, err2 error
	jobID, err1 = url.PathUnescape(j)
	name, err2 = url.PathUnescape(n)
	return jobID, name, err1 == nil && err2 == nil && jobID != "" && name != ""
}

// result turns a terminal job into the MCP answer.
func (c *conn) result(ctx context.Context, j *job.Job, note string, structured bool) *mcp.CallToolResult {
	res := j.Result
	if res == nil {
		res = &tools.Result{Error: fmt.Sprintf("the job ended %s/%s without a result", j.State, j.Reason)}
	}
	ok := j.State == job.StateSucceeded && res.OK
	text := res.Content
	if !ok {
		switch {
		case res.Error != "" && res.Content != "" && !strings.Contains(res.Content, res.Error):
			text = res.Error + "\n" + res.Content
		case res.Error != "":
			text = res.Error
		case text == "":
			text = fmt.Sprintf("the call %s (%s)", j.State, j.Reason)
		}
	}
	out := &mcp.CallToolResult{IsError: !ok, Content: []mcp.Content{&mcp.TextContent{Text: note + text}}}
	if ok && structured {
		var v map[string]any
		if json.Unmarshal([]byte(res.Content), &v) == nil {
			out.StructuredContent = v
		}
	}
	for _, a := range res.Artifacts {
		uri := ArtifactURI(j.ID, a.Name)
		if a.MimeType == "image/png" {
			if full, err := c.s.b.Artifact(ctx, c.tenant, j.ID, a.Name); err == nil && len(full.Data) > 0 {
				out.Content = append(out.Content, &mcp.ImageContent{Data: full.Data, MIMEType: a.MimeType})
				continue
			}
		}
		c.addResource(uri, j.ID, a)
		size := a.Size
		out.Content = append(out.Content, &mcp.ResourceLink{URI: uri, Name: a.Name, MIMEType: a.MimeType, Size: &size})
	}
	return out
}

// addResource lists an artifact in this session's resources.
func (c *conn) addResource(uri, jobID string, a tools.Artifact) {
	c.mu.Lock()
	seen := c.resources[uri]
	c.resources[uri] = true
	c.mu.Unlock()
	if seen {
		return
	}
	c.srv.AddResource(&mcp.Resource{URI: uri, Name: a.Name, MIMEType: a.MimeType, Size: a.Size,
		Description: "artifact of job " + jobID},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return c.read(ctx, req.Params.URI)
		})
}

func (c *conn) read(ctx context.Context, uri string) (*mcp.ReadResourceResult, error) {
	jobID, name, ok := parseArtifactURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	a, err := c.s.b.Artifact(ctx, c.tenant, jobID, name)
	if err != nil {
		if errors.Is(err, job.ErrNotFound) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	rc := &mcp.ResourceContents{URI: uri, MIMEType: a.MimeType}
	if isText(a.MimeType) {
		rc.Text = string(a.Data)
	} else {
		rc.Blob = a.Data
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
}

func isText(mime string) bool {
	mime, _, _ = strings.Cut(mime, ";")
	return strings.HasPrefix(mime, "text/") || slices.Contains([]string{"application/json", "application/xml", "application/yaml"}, mime)
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// describe words a job service error for the model.
func describe(err error) string {
	var ve *tools.ValidationError
	switch {
	case errors.As(err, &ve):
		return "invalid arguments: " + err.Error()
	case errors.Is(err, job.ErrQueueFull):
		return "sandboxd is busy (its queue is full): try again shortly"
	case errors.Is(err, job.ErrSessionLimit):
		return "the tenant's session limit is reached: " + err.Error()
	case errors.Is(err, job.ErrShutdown):
		return "sandboxd is shutting down"
	}
	return err.Error()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
