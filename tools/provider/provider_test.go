package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/tools"
)

func boolp(b bool) *bool { return &b }

type textIn struct {
	Text string `json:"text"`
}
type sleepIn struct {
	MS int `json:"ms"`
}

// testServer is an in-process MCP server with a few tools.
func testServer(started *atomic.Int64) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	gen := started.Load()
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: boolp(false)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s (run %d)", in.Text, gen)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleep.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "note", Description: "Note.", Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(false)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noted"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fail."},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "nope"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "picture", Description: "Picture."},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "here"}, &mcp.ImageContent{Data: []byte("\x89PNG"), MIMEType: "image/png"}}}, nil, nil
		})
	return s
}

// pipeLauncher runs testServer in-process over pipes (a test double for
// a sandboxed process); kill ends the current one like a SIGKILL would.
type pipeLauncher struct {
	started atomic.Int64
	fail    atomic.Int64 // fail the next N launches
	mu      sync.Mutex
	current *pipeProc
}

type pipeProc struct {
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	once      sync.Once
}

func (p *pipeProc) Stdin() io.WriteCloser { return p.inW }
func (p *pipeProc) Stdout() io.ReadCloser { return p.outR }
func (p *pipeProc) Done() <-chan struct{} { return p.done }
func (p *pipeProc) Err() error            { return errors.New("killed by signal SIGKILL") }
func (p *pipeProc) Stop() {
	p.once.Do(func() {
		p.inR.CloseWithError(io.EOF)
		p.outW.CloseWithError(io.EOF)
		close(p.done)
	})
}

func (l *pipeLauncher) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, errors.New("create sandbox: runner unavailable")
	}
	l.fail.Store(0)
	l.started.Add(1)
	p := &pipeProc{done: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	srv := testServer(&l.started)
	go func() {
		_ = srv.Run(context.Background(), &mcp.IOTransport{Reader: p.inR, Writer: p.outW})
		p.Stop()
	}()
	l.mu.Lock()
	l.current = p
	l.mu.Unlock()
	return p, nil
}

func (l *pipeLauncher) kill() {
	l.mu.Lock()
	p := l.current
	l.mu.Unlock()
	p.Stop()
}

func newManager(t *testing.T, l Launcher, cfgs ...Config) (*Manager, *tools.Registry) {
	t.Helper()
	reg := tools.NewRegistry()
	m, err := NewManager(cfgs, Options{Registry: reg, Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Stop)
	return m, reg
}

func waitState(t *testing.T, m *Manager, name, state string) tools.SourceStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, st := range m.Sources() {
			if st.Name == name && st.State == state {
				return st
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("provider %s never %s: %+v", name, state, m.Sources())
	return tools.SourceStatus{}
}

func waitFor(t *testing.T, m *Manager, name string, ok func(tools.SourceStatus) bool) tools.SourceStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, st := range m.Sources() {
			if st.Name == name && ok(st) {
				return st
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("provider %s: condition never met: %+v", name, m.Sources())
	return tools.SourceStatus{}
}

func callTool(t *testing.T, reg *tools.Registry, name, args string) (tools.Result, error) {
	t.Helper()
	_, tool, parsed, err := reg.Prepare(tools.Call{Name: name, Arguments: []byte(args)})
	if err != nil {
		t.Fatalf("Prepare %s: %v", name, err)
	}
	return tool.Run(t.Context(), tools.Env{}, parsed)
}

var stdio = Config{Name: "t", Command: []string{"/mcp"}, Effects: []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite},
	Backoff: 20 * time.Millisecond}

func TestProviderToolsListedAndCalled(t *testing.T) {
	t.Parallel()
	l := &pipeLauncher{}
	cfg := stdio
	cfg.Tools = map[string]ToolConfig{"echo": {ParallelSafe: boolp(true)}}
	m, reg := newManager(t, l, cfg)
	st := waitState(t, m, "t", StateReady)
	slices.Sort(st.Tools)
	if want := []string{"t__echo", "t__fail", "t__note", "t__picture", "t__sleep"}; !slices.Equal(st.Tools, want) {
		t.Fatalf("tools %v, want %v", st.Tools, want)
	}
	// Annotations narrow the granted effects (never widen them).
	for name, want := range map[string][]tools.Effect{
		"t__echo":    {tools.EffectFileRead},                                          // readOnlyHint
		"t__note":    {tools.EffectExec, tools.EffectFileRead},                        // destructiveHint false
		"t__fail":    {tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite}, // no hints: MCP defaults
		"t__picture": {tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite},
	} {
		tl, _ := reg.Lookup(name)
		if !slices.Equal(tl.Effects, want) || tl.Source != "provider:t" {
			t.Errorf("%s effects %v source %q, want %v", name, tl.Effects, tl.Source, want)
		}
	}
	if tl, _ := reg.Lookup("t__echo"); !tl.ParallelSafe || tl.Unavailable() != nil {
		t.Errorf("echo parallel %v available %v", tl.ParallelSafe, tl.Unavailable())
	}
	if tl, _ := reg.Lookup("t__note"); tl.ParallelSafe {
		t.Error("provider tools default to not parallel-safe")
	}
	r, err := callTool(t, reg, "t__echo", `{"text":"hi"}`)
	if err != nil || !r.OK || r.Content != "hi (run 1)" {
		t.Errorf("echo: %+v %v", r, err)
	}
	r, _ = callTool(t, reg, "t__fail", `{}`)
	if r.OK || r.Error != "nope" {
		t.Errorf("fail: %+v", r)
	}
	r, _ = callTool(t, reg, "t__picture", `{}`)
	if r.Content != "here" || len(r.Artifacts) != 1 || r.Artifacts[0].Name != "image-1.png" {
		t.Errorf("picture: %+v", r)
	}
	if _, _, _, err := reg.Prepare(tools.Call{Name: "t__echo", Arguments: []byte(`{"text": 3}`)}); err == nil {
		t.Error("the server's schema is not enforced")
	}
}

func TestProviderKilledAndRestarted(t *testing.T) {
	t.Parallel()
	l := &pipeLauncher{}
	m, reg := newManager(t, l, stdio)
	waitState(t, m, "t", StateReady)
	errc := make(chan error, 1)
	go func() {
		_, err := callTool(t, reg, "t__sleep", `{"ms": 10000}`)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	l.kill()
	err := <-errc
	if !errors.Is(err, tools.ErrInfrastructure) || errors.Is(err, tools.ErrNotStarted) || !strings.Contains(err.Error(), "died during the call") {
		t.Fatalf("call during the kill: %v", err)
	}
	st := waitFor(t, m, "t", func(st tools.SourceStatus) bool { return st.State == StateReady && st.Restarts == 1 })
	if l.started.Load() != 2 {
		t.Errorf("restarts %d, launches %d", st.Restarts, l.started.Load())
	}
	r, err := callTool(t, reg, "t__echo", `{"text":"back"}`)
	if err != nil || r.Content != "back (run 2)" {
		t.Errorf("after restart: %+v %v", r, err)
	}
}

func TestProviderUnavailableWhileRestarting(t *testing.T) {
	t.Parallel()
	l := &pipeLauncher{}
	cfg := stdio
	cfg.Backoff, cfg.MaxBackoff = time.Hour, time.Hour
	m, reg := newManager(t, l, cfg)
	waitState(t, m, "t", StateReady)
	l.kill()
	st := waitState(t, m, "t", StateRestarting)
	if st.NextStart == nil || st.Error != "the server process killed by signal SIGKILL" {
		t.Errorf("status %+v", st)
	}
	tl, ok := reg.Lookup("t__echo")
	if !ok || tl.Unavailable() == nil || !strings.Contains(tl.Unavailable().Error(), "provider t is restarting") {
		t.Fatalf("tool while restarting: %v %v", ok, tl.Unavailable())
	}
	_, err := tl.Run(t.Context(), tools.Env{}, map[string]any{"text": "x"})
	if !errors.Is(err, tools.ErrInfrastructure) || !errors.Is(err, tools.ErrNotStarted) {
		t.Errorf("call while restarting: %v", err)
	}
}

func TestProviderStartFailureDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	bad := &pipeLauncher{}
	bad.fail.Store(1 << 30)
	good := &pipeLauncher{}
	reg := tools.NewRegistry()
	cfgGood := stdio
	cfgBad := stdio
	cfgBad.Name = "broken"
	m1, err := NewManager([]Config{cfgBad}, Options{Registry: reg, Launcher: bad})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager([]Config{cfgGood}, Options{Registry: reg, Launcher: good})
	if err != nil {
		t.Fatal(err)
	}
	m1.Start()
	m2.Start()
	defer m1.Stop()
	defer m2.Stop()
	waitState(t, m2, "t", StateReady)
	st := waitState(t, m1, "broken", StateRestarting)
	if !strings.Contains(st.Error, "runner unavailable") {
		t.Errorf("status %+v", st)
	}
}

func TestProviderLazy(t *testing.T) {
	t.Parallel()
	l := &pipeLauncher{}
	cfg := stdio
	cfg.Lazy = true
	m, reg := newManager(t, l, cfg)
	time.Sleep(50 * time.Millisecond)
	if l.started.Load() != 0 || m.Sources()[0].State != StateStopped {
		t.Fatalf("a lazy provider started at boot: %+v", m.Sources())
	}
	// The first call of one of its tools starts it.
	r, err := callTool(t, reg, "t__echo", `{"text":"lazy"}`)
	if err != nil || r.Content != "lazy (run 1)" {
		t.Fatalf("%+v %v", r, err)
	}
	if _, ok := reg.Lookup("t__nope"); ok {
		t.Error("an unknown tool resolved")
	}
}

func TestProviderURL(t *testing.T) {
	t.Parallel()
	var started atomic.Int64
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testServer(&started) }, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	cfg := Config{Name: "web", URL: srv.URL, Effects: []tools.Effect{tools.EffectHTTP}, Backoff: time.Hour}
	m, _ := newManager(t, nil, cfg)
	st := waitState(t, m, "web", StateRestarting)
	if !strings.Contains(st.Error, "loopback") {
		t.Errorf("a loopback URL was not refused: %+v", st)
	}
	cfg.AllowPrivate = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	m, reg := newManager(t, nil, cfg)
	waitState(t, m, "web", StateReady)
	r, err := callTool(t, reg, "web__echo", `{"text":"over http"}`)
	if err != nil || !r.OK || !strings.HasPrefix(r.Content, "over http") {
		t.Errorf("%+v %v", r, err)
	}
	if tl, _ := reg.Lookup("web__echo"); len(tl.Effects) != 0 {
		t.Errorf("effects %v (openWorldHint false takes http away)", tl.Effects)
	}
	if tl, _ := reg.Lookup("web__sleep"); !slices.Equal(tl.Effects, []tools.Effect{tools.EffectHTTP}) {
		t.Errorf("sleep effects %v (openWorldHint unset keeps http)", tl.Effects)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Name: "a__b", Command: []string{"x"}, Effects: []tools.Effect{tools.EffectExec}},
		{Name: "a", Effects: []tools.Effect{tools.EffectExec}},
		{Name: "a", Command: []string{"x"}, URL: "http://example.com"},
		{Name: "a", Command: []string{"x"}},
		{Name: "a", Command: []string{"x"}, Effects: []tools.Effect{tools.EffectExec}, Tools: map[string]ToolConfig{"t": {Effects: []tools.Effect{tools.EffectHTTP}}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
