package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

// restartWait: a call finding its provider restarting waits for it when
// the next start is at most this far away (a short backoff after a
// crash), and is refused at once otherwise.
const restartWait = 5 * time.Second

// stableAfter: a provider that stayed up this long restarts with the
// first backoff again.
const stableAfter = 30 * time.Second

// provider is one configured MCP server and its lifecycle.
type provider struct {
	cfg Config
	m   *Manager
	log *slog.Logger

	mu       sync.Mutex
	state    string
	err      error
	since    time.Time
	next     time.Time
	restarts int
	running  bool          // the lifecycle loop runs
	ready    chan struct{} // closed while state is ready; replaced when it leaves
	changed  chan struct{} // closed and replaced on every state change
	cs       *mcp.ClientSession
	connDone chan struct{} // closed when the current session ended
	names    []string      // registry names of its tools
}

func newProvider(m *Manager, cfg Config) *provider {
	return &provider{cfg: cfg, m: m, log: m.log.With("provider", cfg.Name), state: StateStopped,
		ready: make(chan struct{}), changed: make(chan struct{}), since: time.Now().UTC()}
}

// setState records a transition; p.mu is held.
func (p *provider) setStateLocked(state string, err error) {
	if state == StateReady && p.state != StateReady {
		close(p.ready)
	}
	if state != StateReady && p.state == StateReady {
		p.ready = make(chan struct{})
	}
	p.state, p.err, p.since = state, err, time.Now().UTC()
	close(p.changed)
	p.changed = make(chan struct{})
}

// ensureRunning starts the lifecycle loop once.
func (p *provider) ensureRunning() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || p.m.stopped() {
		return
	}
	p.running = true
	p.m.wg.Go(p.loop)
}

// loop starts the server, waits for it to end, and starts it again with
// backoff, until the manager stops.
func (p *provider) loop() {
	backoff := p.cfg.Backoff
	for {
		if p.m.stopped() {
			return
		}
		p.mu.Lock()
		p.setStateLocked(StateStarting, p.err)
		p.mu.Unlock()
		started := time.Now()
		cs, stop, why, err := p.start()
		if err == nil {
			p.log.Info("provider ready", "tools", len(p.toolNames()))
			err = p.serve(cs, stop, why)
			if p.m.stopped() {
				return
			}
			if time.Since(started) > stableAfter {
				backoff = p.cfg.Backoff
			}
			p.log.Warn("provider died; restarting", "err", err, "backoff", backoff)
		} else {
			if p.m.stopped() {
				return
			}
			p.log.Warn("provider failed to start", "err", err, "backoff", backoff)
		}
		p.mu.Lock()
		p.restarts++
		p.next = time.Now().Add(backoff).UTC()
		p.setStateLocked(StateRestarting, err)
		p.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-p.m.quit:
			return
		}
		backoff = min(backoff*2, p.cfg.MaxBackoff)
	}
}

// start connects: a sandboxed process for a stdio server, an HTTP client
// for a URL, then initialize and tools/list. stop ends what start began;
// why says how a stdio server's process ended (nil while it runs).
func (p *provider) start() (*mcp.ClientSession, func(), func() error, error) {
	ctx, cancel := context.WithTimeout(p.m.ctx, p.cfg.StartTimeout)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "sandboxd", Version: p.m.version}, &mcp.ClientOptions{
		KeepAlive: 5 * time.Second,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			go p.refreshSoon()
		},
	})
	var transport mcp.Transport
	stop := func() {}
	why := func() error { return nil }
	if len(p.cfg.Command) > 0 {
		if p.m.launcher == nil {
			return nil, stop, why, errors.New("no sandbox runner to start the provider in")
		}
		proc, err := p.m.launcher.Launch(ctx, LaunchSpec{Name: "provider-" + p.cfg.Name, Args: p.cfg.Command, Env: p.cfg.Env,
			Effects: p.cfg.Effects, Image: p.cfg.Image, Workspace: p.cfg.Workspace})
		if err != nil {
			return nil, stop, why, err
		}
		stop = proc.Stop
		why = func() error {
			select {
			case <-proc.Done():
				return fmt.Errorf("the server process %w", proc.Err())
			case <-time.After(time.Second): // the connection ended first
				return nil
			}
		}
		transport = &procTransport{proc: proc}
	} else {
		hc, err := p.httpClient()
		if err != nil {
			return nil, stop, why, err
		}
		transport = &mcp.StreamableClientTransport{Endpoint: p.cfg.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		err = fmt.Errorf("initialize: %w", err)
		if w := why(); w != nil {
			err = fmt.Errorf("%w (%w)", err, w)
		}
		stop()
		return nil, func() {}, why, err
	}
	if err := p.refresh(ctx, cs); err != nil {
		cs.Close()
		stop()
		return nil, func() {}, why, err
	}
	return cs, stop, why, nil
}

// serve marks the provider ready and waits until its session ends (the
// process died, the server went away, keepalive pings failed) or the
// manager stops.
func (p *provider) serve(cs *mcp.ClientSession, stop func(), why func() error) error {
	done := make(chan struct{})
	var werr error
	go func() { werr = cs.Wait(); close(done) }()
	p.mu.Lock()
	p.cs, p.connDone = cs, done
	p.setStateLocked(StateReady, nil)
	p.mu.Unlock()
	ended := false
	select {
	case <-done:
		ended = true
	case <-p.m.quit:
	}
	var reason error
	if ended {
		reason = why()
	}
	cs.Close()
	stop()
	<-done
	p.mu.Lock()
	p.cs = nil
	p.mu.Unlock()
	switch {
	case reason != nil:
		return reason
	case werr == nil:
		return errors.New("the server closed the connection")
	}
	return werr
}

// refreshSoon re-lists the tools after a tools/list_changed notification.
func (p *provider) refreshSoon() {
	p.mu.Lock()
	cs := p.cs
	p.mu.Unlock()
	if cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.m.ctx, p.cfg.StartTimeout)
	defer cancel()
	if err := p.refresh(ctx, cs); err != nil {
		p.log.Warn("provider tools/list after a change", "err", err)
	}
}

// refresh lists the server's tools and makes the registry hold exactly
// them, as <provider>__<tool>.
func (p *provider) refresh(ctx context.Context, cs *mcp.ClientSession) error {
	var listed []*tools.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		tool, err := p.toolOf(t)
		if err != nil {
			p.log.Warn("provider tool skipped", "tool", t.Name, "err", err)
			continue
		}
		listed = append(listed, tool)
	}
	reg := p.m.reg
	var names []string
	for _, t := range listed {
		if err := reg.Register(t); err != nil {
			p.log.Warn("provider tool refused", "tool", t.Name, "err", err)
			continue
		}
		names = append(names, t.Name)
	}
	p.mu.Lock()
	old := p.names
	p.names = names
	p.mu.Unlock()
	for _, n := range old {
		if !slices.Contains(names, n) {
			reg.Remove(n)
		}
	}
	return nil
}

// toolOf makes the registry tool of one server tool.
func (p *provider) toolOf(t *mcp.Tool) (*tools.Tool, error) {
	name := p.cfg.Name + "__" + t.Name
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	tc := p.cfg.Tools[t.Name]
	effects := p.cfg.Effects
	if tc.Effects != nil {
		effects = tc.Effects
	}
	if a := t.Annotations; a != nil { // hints only narrow what the operator granted
		effects = tools.Annotations{ReadOnly: a.ReadOnlyHint, Destructive: a.DestructiveHint, OpenWorld: a.OpenWorldHint}.Narrow(effects)
	}
	parallel := p.cfg.ParallelSafe
	if tc.ParallelSafe != nil {
		parallel = *tc.ParallelSafe
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" {
		desc = "Tool " + t.Name + " of provider " + p.cfg.Name + "."
	}
	remote := t.Name
	return &tools.Tool{
		Name: name, Description: desc, InputSchema: schema, Effects: slices.Clone(effects),
		ParallelSafe: parallel, Idempotent: tc.Idempotent, ReturnDirect: tc.ReturnDirect, Source: "provider:" + p.cfg.Name,
		Available: p.unavailable,
		Run: func(ctx context.Context, _ tools.Env, args map[string]any) (tools.Result, error) {
			return p.call(ctx, remote, args)
		},
	}, nil
}

func (p *provider) toolNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.names)
}

// unavailable says why the provider's tools cannot be called now.
func (p *provider) unavailable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case StateReady:
		return nil
	case StateStopped:
		return nil // lazy: the first call starts it
	case StateRestarting:
		msg := fmt.Sprintf("provider %s is restarting", p.cfg.Name)
		if p.err != nil {
			msg += " after: " + p.err.Error()
		}
		if !p.next.IsZero() {
			msg += fmt.Sprintf(" (next start %s)", p.next.Format(time.RFC3339))
		}
		return errors.New(msg)
	default:
		return fmt.Errorf("provider %s is starting", p.cfg.Name)
	}
}

// session returns the ready session, starting a lazy provider and
// waiting for it up to its start timeout.
func (p *provider) session(ctx context.Context) (*mcp.ClientSession, chan struct{}, error) {
	p.ensureRunning()
	wait, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	for {
		p.mu.Lock()
		cs, done, state, changed, next := p.cs, p.connDone, p.state, p.changed, p.next
		p.mu.Unlock()
		if state == StateReady && cs != nil {
			select {
			case <-done: // ended; the loop has not noticed yet
			default:
				return cs, done, nil
			}
		}
		if state == StateRestarting && time.Until(next) > restartWait {
			// Do not hold the call through a long backoff.
			return nil, nil, fmt.Errorf("%w: %w: %w", tools.ErrInfrastructure, tools.ErrNotStarted, p.unavailable())
		}
		select {
		case <-changed:
		case <-wait.Done():
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("%w: %w: provider %s did not become ready within %s", tools.ErrInfrastructure, tools.ErrNotStarted, p.cfg.Name, p.cfg.StartTimeout)
		}
	}
}

// call runs one tool call on the server.
func (p *provider) call(ctx context.Context, name string, args map[string]any) (tools.Result, error) {
	cs, done, err := p.session(ctx)
	if err != nil {
		return tools.Result{}, err
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
	wall := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err() // the job's own timeout or cancel
		}
		if cctx.Err() != nil {
			return tools.Result{OK: false, Error: fmt.Sprintf("provider %s did not answer within %s", p.cfg.Name, p.cfg.CallTimeout)}, nil
		}
		// The connection ended under the call (the server died), or the
		// server answered the request with a protocol error.
		select {
		case <-done:
			return tools.Result{}, fmt.Errorf("%w: provider %s died during the call: %v", tools.ErrInfrastructure, p.cfg.Name, err)
		case <-time.After(200 * time.Millisecond):
		}
		var we *jsonrpc.Error
		if errors.As(err, &we) && (we.Code == -32003 || we.Code == -32004) {
			return tools.Result{}, fmt.Errorf("%w: provider %s: %v", tools.ErrInfrastructure, p.cfg.Name, err)
		}
		return tools.Result{OK: false, Error: fmt.Sprintf("provider %s refused the call: %v", p.cfg.Name, err)}, nil
	}
	return resultOf(res, wall), nil
}

// resultOf converts an MCP tool result: text is the content; images,
// audio and binary resources become artifacts (never the model's text);
// structured content stands in when there is no text; isError fails it.
func resultOf(res *mcp.CallToolResult, wall time.Duration) tools.Result {
	var text []string
	r := tools.Result{OK: !res.IsError, Usage: tools.Usage{WallMS: wall.Milliseconds()}}
	n := 0
	art := func(prefix, mime string, data []byte) {
		n++
		r.Artifacts = append(r.Artifacts, tools.Artifact{Name: fmt.Sprintf("%s-%d%s", prefix, n, extOf(mime)), MimeType: mime,
			Size: int64(len(data)), Data: data})
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			text = append(text, c.Text)
		case *mcp.ImageContent:
			art("image", c.MIMEType, c.Data)
		case *mcp.AudioContent:
			art("audio", c.MIMEType, c.Data)
		case *mcp.ResourceLink:
			text = append(text, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			if c.Resource.Text != "" {
				text = append(text, c.Resource.Text)
			} else if len(c.Resource.Blob) > 0 {
				art("resource", c.Resource.MIMEType, c.Resource.Blob)
			}
		}
	}
	content := strings.Join(text, "\n")
	if content == "" && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			content = string(b)
		}
	}
	if res.IsError {
		r.Error = content
		if r.Error == "" {
			r.Error = "the tool reported an error"
		}
		return r
	}
	r.Content = content
	return r
}

func extOf(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	case "audio/wav":
		return ".wav"
	case "application/json":
		return ".json"
	case "text/plain":
		return ".txt"
	}
	return ""
}

// httpClient reaches a URL provider only at an allowed address: the
// guard checks every address the dialer connects to (after resolution),
// so a name cannot be rebound to a private one.
func (p *provider) httpClient() (*http.Client, error) {
	u, err := url.Parse(p.cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want http(s)://host[:port]/path", p.cfg.URL)
	}
	guard := netclass.NewGuard(p.cfg.AllowPrivate, p.m.protected)
	if err := guard.CheckURL(u); err != nil {
		return nil, fmt.Errorf("url %s: %w", p.cfg.URL, err)
	}
	d := &netclass.Dialer{Guard: guard, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, Proxy: nil, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second}
	return &http.Client{Transport: tr}, nil
}

// procTransport speaks MCP over a launched process's stdio.
type procTransport struct{ proc Process }

func (t *procTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	return (&mcp.IOTransport{Reader: t.proc.Stdout(), Writer: t.proc.Stdin()}).Connect(ctx)
}
