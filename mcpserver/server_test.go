package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// fakeBackend answers each call with what answer returns; block makes
// Wait block until its context ends.
type fakeBackend struct {
	reg *tools.Registry

	mu        sync.Mutex
	jobs      map[string]*job.Job
	artifacts map[string]*tools.Artifact // by job/name
	submitted []job.SubmitRequest
	created   []string
	closed    []string
	cancelled []string
	answer    func(req job.SubmitRequest) (*job.Job, error)
	block     bool

	registryCalls atomic.Int32 // one per mcp.Server made (newMCPServer)
}

func (f *fakeBackend) Registry() *tools.Registry { f.registryCalls.Add(1); return f.reg }

func (f *fakeBackend) Submit(_ context.Context, tenant string, req job.SubmitRequest) (*job.Job, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, req)
	j, err := f.answer(req)
	if err != nil {
		return nil, false, err
	}
	j.ID, j.Tenant, j.SessionID = "job_"+string(rune('a'+len(f.submitted))), tenant, req.SessionID
	f.jobs[j.ID] = j
	return j, true, nil
}

func (f *fakeBackend) Wait(ctx context.Context, _, id string) (*job.Job, error) {
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jobs[id], nil
}

func (f *fakeBackend) Cancel(_ context.Context, _, id string) (*job.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return f.jobs[id], nil
}

func (f *fakeBackend) Subscribe(ctx context.Context, _, _ string) (<-chan job.Event, error) {
	ch := make(chan job.Event, 2)
	ch <- job.Event{Type: job.EventStarted}
	ch <- job.Event{Type: job.EventStdout, Data: "hello"}
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (f *fakeBackend) Artifact(_ context.Context, _, jobID, name string) (*tools.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.artifacts[jobID+"/"+name]; a != nil {
		return a, nil
	}
	return nil, job.ErrNotFound
}

func (f *fakeBackend) CreateSession(_ context.Context, tenant string, _ job.SessionRequest) (*job.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "ses_" + string(rune('a'+len(f.created)))
	f.created = append(f.created, id)
	return &job.Session{ID: id, Tenant: tenant}, nil
}

func (f *fakeBackend) CloseSession(_ context.Context, _, id string) (*job.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, id)
	return &job.Session{ID: id}, nil
}

func obj(props string) json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` + props + `}}`)
}

func newFake(t *testing.T) *fakeBackend { return newFakeB(t) }

func newFakeB(t testing.TB) *fakeBackend {
	t.Helper()
	reg := tools.NewRegistry()
	for _, tl := range []*tools.Tool{
		{Name: "repl", Description: "runs code", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileWrite},
			InputSchema: obj(`"code":{"type":"string"}`), Command: func(map[string]any) (tools.Command, error) { return tools.Command{}, nil }},
		{Name: "calc", Description: "adds", InputSchema: obj(`"x":{"type":"number"}`),
			OutputSchema: obj(`"v":{"type":"number"}`),
			Run:          func(context.Context, tools.Env, map[string]any) (tools.Result, error) { return tools.Result{}, nil }},
		{Name: "fetch", Description: "gets", Effects: []tools.Effect{tools.EffectHTTP}, InputSchema: obj(``),
			Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) { return tools.Result{}, nil }},
	} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeBackend{reg: reg, jobs: map[string]*job.Job{}, artifacts: map[string]*tools.Artifact{}}
}

// connect runs one MCP session against s in memory.
func connect(t *testing.T, s *Server, opts *mcp.ClientOptions) (*mcp.ClientSession, func()) {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	srv := s.newMCPServer("acme")
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, func() { cs.Close(); _ = ss.Wait() }
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsAndAnnotations(t *testing.T) {
	f := newFake(t)
	cs, done := connect(t, New(f, Options{}), nil)
	defer done()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tl := range lt.Tools {
		got[tl.Name] = tl
	}
	for _, name := range []string{"repl", "calc", "fetch"} {
		tl, want := got[name], tools.AnnotationsOf(mustTool(t, f, name).Effects, false)
		if tl == nil || tl.Annotations == nil {
			t.Fatalf("%s missing or without annotations", name)
		}
		a := tl.Annotations
		if a.ReadOnlyHint != want.ReadOnly || *a.DestructiveHint != *want.Destructive || *a.OpenWorldHint != *want.OpenWorld || a.IdempotentHint != want.Idempotent {
			t.Errorf("%s: annotations %+v, want %+v", name, a, want)
		}
	}
	if got["calc"].OutputSchema == nil || got["repl"].OutputSchema != nil {
		t.Errorf("output schemas: calc %v repl %v", got["calc"].OutputSchema, got["repl"].OutputSchema)
	}
}

func mustTool(t *testing.T, f *fakeBackend, name string) *tools.Tool {
	tl, ok := f.reg.Lookup(name)
	if !ok {
		t.Fatal(name)
	}
	return tl
}

// TestSessionPerMCPSession: sandboxed calls share one sandboxd session,
// made at the first of them and closed when the MCP session ends; other
// calls run one-shot.
func TestSessionPerMCPSession(t *testing.T) {
	f := newFake(t)
	f.answer = func(job.SubmitRequest) (*job.Job, error) {
		return &job.Job{State: job.StateSucceeded, Result: &tools.Result{OK: true, Content: `{"v":3}`}}, nil
	}
	cs, done := connect(t, New(f, Options{}), nil)
	ctx := context.Background()
	for _, name := range []string{"calc", "repl", "repl", "fetch"} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %+v", name, err, r)
		}
		if name == "calc" && r.StructuredContent == nil {
			t.Errorf("calc: no structured content")
		}
	}
	done()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.closed)
		f.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.created) != 1 || len(f.closed) != 1 || f.closed[0] != f.created[0] {
		t.Fatalf("sessions created %v closed %v, want one of each", f.created, f.closed)
	}
	var in []string
	for _, r := range f.submitted {
		in = append(in, r.Call.Name+"@"+r.SessionID)
	}
	if want := "calc@ repl@ses_a repl@ses_a fetch@"; strings.Join(in, " ") != want {
		t.Fatalf("calls %q, want %q", strings.Join(in, " "), want)
	}
}

// TestHTTPServerPerSession: over Streamable HTTP an mcp.Server (every
// tool added) is made once per MCP session, not per request, and each
// session still has its own sandboxd session.
func TestHTTPServerPerSession(t *testing.T) {
	f := newFake(t)
	f.answer = func(job.SubmitRequest) (*job.Job, error) {
		return &job.Job{State: job.StateSucceeded, Result: &tools.Result{OK: true, Content: `{"v":3}`}}, nil
	}
	hs := httptest.NewServer(New(f, Options{}).HandlerFor("acme"))
	defer hs.Close()
	ctx := context.Background()
	for range 2 {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		made := f.registryCalls.Load() // the SDK's client tries server/discover first: a server for it too
		for _, name := range []string{"calc", "repl", "repl", "calc"} {
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
			if err != nil || r.IsError {
				t.Fatalf("%s: %v %+v", name, err, r)
			}
			if name == "calc" && r.StructuredContent == nil {
				t.Errorf("calc: no structured content")
			}
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := f.registryCalls.Load(); n != made {
			t.Errorf("%d servers made by 5 requests of an MCP session, want none", n-made)
		}
		cs.Close()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.created) != 2 || f.created[0] == f.created[1] {
		t.Errorf("sandboxd sessions created %v, want two different", f.created)
	}
}

// TestErrorsAreResults: a refusal, a tool error and an invalid call are
// isError results with readable text, never protocol errors.
func TestErrorsAreResults(t *testing.T) {
	f := newFake(t)
	f.answer = func(req job.SubmitRequest) (*job.Job, error) {
		switch string(req.Call.Arguments) {
		case `{"x":1}`:
			return &job.Job{State: job.StateFailed, Reason: "denied", Result: &tools.Result{Error: "refused by policy: no"}}, nil
		case `{"x":2}`:
			return &job.Job{State: job.StateFailed, Reason: job.ReasonToolError, Result: &tools.Result{Content: "Traceback", Error: "exit status 1"}}, nil
		case `{"x":3}`:
			return nil, job.ErrQueueFull
		}
		return nil, errors.New("boom")
	}
	cs, done := connect(t, New(f, Options{}), nil)
	defer done()
	for x, want := range map[int]string{1: "refused by policy: no", 2: "exit status 1\nTraceback", 3: "queue is full", 4: "boom"} {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "calc", Arguments: map[string]any{"x": x}})
		if err != nil || !r.IsError || !strings.Contains(textOf(r), want) {
			t.Errorf("x=%d: err %v result %+v text %q, want isError with %q", x, err, r, textOf(r), want)
		}
	}
}

// TestArtifacts: a PNG is image content; another artifact is a
// resource link, listed and read as a resource.
func TestArtifacts(t *testing.T) {
	f := newFake(t)
	f.answer = func(job.SubmitRequest) (*job.Job, error) {
		return &job.Job{State: job.StateSucceeded, Result: &tools.Result{OK: true, Content: "ok", Artifacts: []tools.Artifact{
			{Name: "plot.png", MimeType: "image/png", Size: 4}, {Name: "data.csv", MimeType: "text/csv", Size: 4}}}}, nil
	}
	f.artifacts["job_b/plot.png"] = &tools.Artifact{Name: "plot.png", MimeType: "image/png", Data: []byte("\x89PNG")}
	f.artifacts["job_b/data.csv"] = &tools.Artifact{Name: "data.csv", MimeType: "text/csv", Data: []byte("a,b\n")}
	cs, done := connect(t, New(f, Options{}), nil)
	defer done()
	ctx := context.Background()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "repl", Arguments: map[string]any{}})
	if err != nil || r.IsError || len(r.Content) != 3 {
		t.Fatalf("%v %+v", err, r)
	}
	img, ok := r.Content[1].(*mcp.ImageContent)
	link, ok2 := r.Content[2].(*mcp.ResourceLink)
	if !ok || string(img.Data) != "\x89PNG" || !ok2 || link.URI != ArtifactURI("job_b", "data.csv") {
		t.Fatalf("content: %#v %#v", r.Content[1], r.Content[2])
	}
	lr, err := cs.ListResources(ctx, nil)
	if err != nil || len(lr.Resources) != 1 || lr.Resources[0].URI != link.URI {
		t.Fatalf("resources/list: %v %+v", err, lr)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "a,b\n" {
		t.Fatalf("resources/read: %v %+v", err, rr)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: ArtifactURI("job_b", "nope")}); err == nil {
		t.Fatal("reading an artifact not listed should fail")
	}
}

// TestCancelAndProgress: progress notifications while the job runs;
// cancelling the request cancels the job.
func TestCancelAndProgress(t *testing.T) {
	f := newFake(t)
	f.block = true
	f.answer = func(job.SubmitRequest) (*job.Job, error) { return &job.Job{State: job.StateRunning}, nil }
	progress := make(chan string, 8)
	cs, done := connect(t, New(f, Options{}), &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		progress <- r.Params.Message
	}})
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	p := &mcp.CallToolParams{Name: "repl", Arguments: map[string]any{}}
	p.SetProgressToken("tok")
	errc := make(chan error, 1)
	go func() { _, err := cs.CallTool(ctx, p); errc <- err }()
	for _, want := range []string{"running", "stdout: hello"} {
		select {
		case got := <-progress:
			if got != want {
				t.Fatalf("progress %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no progress %q", want)
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled call should fail on the client")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.cancelled)
		f.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestArtifactURI(t *testing.T) {
	for _, c := range [][2]string{{"job_1", "plot.png"}, {"j", "a b/c%.txt"}} {
		j, n, ok := parseArtifactURI(ArtifactURI(c[0], c[1]))
		if !ok || j != c[0] || n != c[1] {
			t.Errorf("%q: %q %q %v", c, j, n, ok)
		}
	}
	for _, bad := range []string{"", "sandboxd://jobs/", "sandboxd://jobs/j/artifacts/", "sandboxd://jobs//artifacts/x", "file:///etc/passwd", "sandboxd://jobs/j/artifacts/a/b"} {
		if _, _, ok := parseArtifactURI(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzArtifactURI(f *testing.F) {
	f.Add("sandboxd://jobs/job_1/artifacts/plot.png")
	f.Add("sandboxd://jobs/a%2Fb/artifacts/c%20d")
	f.Fuzz(func(t *testing.T, uri string) {
		j, n, ok := parseArtifactURI(uri)
		if !ok {
			return
		}
		if j == "" || n == "" {
			t.Fatalf("%q: empty part", uri)
		}
		if j2, n2, ok := parseArtifactURI(ArtifactURI(j, n)); !ok || j2 != j || n2 != n {
			t.Fatalf("%q: round trip %q %q → %q %q", uri, j, n, j2, n2)
		}
	})
}
