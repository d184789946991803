package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
)

// TestOpenAPIProperty generates requests from api/openapi.yaml (path and
// query parameters, headers and JSON bodies from their schemas, valid and
// broken) and sends them to the real handler over a real job service (a
// SQLite store, the fake runner, one in-process tool). Every answer must be
// documented: its status listed for the operation and its body matching
// the schema. A request the document accepts must not be refused as
// malformed (400), and one it refuses must not succeed (2xx): the document
// says what the server enforces.
func TestOpenAPIProperty(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	h, known := propertyServer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 60
	if testing.Short() {
		n = 15
	}
	var paths []string
	for p := range doc.Paths.Map() {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		item := doc.Paths.Value(p)
		for _, method := range []string{"GET", "POST", "PUT", "DELETE"} {
			op := item.GetOperation(method)
			if op == nil || skipProperty(p, method) {
				continue
			}
			for i := range n {
				g := &reqGen{rng: rng, known: known}
				req, body := g.request(method, p, append(item.Parameters, op.Parameters...), op.RequestBody)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req.Clone(t.Context()))
				checkSpec(t, withBody(req, body), rec)
				valid := validRequest(t, withBody(req, body))
				switch {
				case valid && rec.Code == http.StatusBadRequest && !configDependent(rec.Body.String()):
					t.Errorf("#%d %s %s %s: the document accepts it, the server answered 400: %s", i, method, req.URL, body, rec.Body)
				case !valid && rec.Code/100 == 2:
					t.Errorf("#%d %s %s %s: the document refuses it, the server answered %d", i, method, req.URL, body, rec.Code)
				}
			}
		}
	}
}

// configDependent: 400s the document cannot foresee, since they depend on
// the operator's configuration (ceilings, maximum TTLs, allowed images) or
// on an opaque cursor of an earlier page; the message says which.
func configDependent(body string) bool {
	for _, s := range []string{"exceeds the ceiling", "exceeds the maximum", "is not allowed for tenant", "malformed cursor"} {
		if strings.Contains(body, s) {
			return true
		}
	}
	return false
}

// skipProperty: routes the property test leaves to their own tests (they
// stream, take binary bodies, need services this server lacks, or block).
func skipProperty(path, method string) bool {
	switch {
	case strings.HasSuffix(path, "/events"), strings.HasSuffix(path, "/archive"),
		strings.HasPrefix(path, "/v1/tool-calls"), strings.HasPrefix(path, "/v1/admin"),
		strings.HasPrefix(path, "/v1/dashboard"), strings.Contains(path, "/files/"):
		return true
	}
	return false
}

func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	return r
}

// validRequest reports whether the document accepts the request.
func validRequest(t *testing.T, req *http.Request) bool {
	t.Helper()
	router := openAPIRouter(t)
	req.URL.Scheme, req.URL.Host = "http", "example.com"
	route, params, err := router.FindRoute(req)
	if err != nil {
		return false
	}
	err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
	return err == nil
}

// propertyServer is the handler over a real job service, with one job and
// one session made (their IDs are among the generated path parameters).
func propertyServer(t *testing.T) (http.Handler, []string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{
		Name: "echo", Description: "Echo the text back.",
		InputSchema:  []byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return tools.Result{OK: true, Content: args["text"].(string)}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	svc, err := job.New(job.Config{Queue: config.Queue{Workers: 2, Size: 64}, WorkDir: filepath.Join(dir, "work"),
		Metrics: job.NewMetrics(prometheus.NewRegistry())}, st, reg, fake.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
		st.Close()
	})
	j, _, err := svc.Submit(t.Context(), "default", job.SubmitRequest{Call: tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := svc.CreateSession(t.Context(), "default", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return New(svc, Options{API: config.API{MaxWait: 50 * time.Millisecond}}), []string{j.ID, s.ID, "echo"}
}

// reqGen makes one request from an operation's parameters and body schema.
type reqGen struct {
	rng   *rand.Rand
	known []string
	depth int
}

// strings a generator picks from: empty, odd, long, and the server's own.
var propStrings = []string{"", "x", "true", "false", "0", "-1", "2.5", "10s", "1m30s", "null", "{}", "é✓", "a b", "sandboxd", "openai", "mcp", "anthropic",
	"job_00000000000000000000000000", "ses_00000000000000000000000000", strings.Repeat("z", 300), "2026-01-01T00:00:00Z"}

func (g *reqGen) str(s *openapi3.Schema) string {
	if s != nil && len(s.Enum) > 0 && g.rng.IntN(5) > 0 {
		return fmt.Sprint(s.Enum[g.rng.IntN(len(s.Enum))])
	}
	if g.rng.IntN(3) == 0 {
		return g.known[g.rng.IntN(len(g.known))]
	}
	return propStrings[g.rng.IntN(len(propStrings))]
}

func (g *reqGen) request(method, path string, params openapi3.Parameters, body *openapi3.RequestBodyRef) (*http.Request, []byte) {
	q := url.Values{}
	hdr := http.Header{}
	for _, pr := range params {
		p := pr.Value
		var s *openapi3.Schema
		if p.Schema != nil {
			s = p.Schema.Value
		}
		switch p.In {
		case "path":
			v := g.str(s)
			if v == "" {
				v = "x"
			}
			path = strings.Replace(path, "{"+p.Name+"}", url.PathEscape(v), 1)
		case "query":
			if g.rng.IntN(2) == 0 {
				q.Set(p.Name, g.scalar(s))
			}
		case "header":
			if g.rng.IntN(3) == 0 {
				if v := g.str(s); v != "" && !strings.ContainsAny(v, "\r\n") {
					hdr.Set(p.Name, v)
				}
			}
		}
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var data []byte
	if body != nil && body.Value != nil {
		if mt := body.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
			switch g.rng.IntN(8) {
			case 0:
				data = []byte([]string{"null", "[]", "", "{", `"x"`, "1"}[g.rng.IntN(6)])
			default:
				data, _ = json.Marshal(g.value(mt.Schema.Value))
			}
		}
	}
	req := httptest.NewRequest(method, target, bytes.NewReader(data))
	if len(data) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	return req, data
}

func (g *reqGen) scalar(s *openapi3.Schema) string {
	if s != nil && s.Type != nil {
		switch {
		case s.Type.Is("integer"):
			return fmt.Sprint([]int{0, 1, -1, 5, 1000, 1 << 40}[g.rng.IntN(6)])
		case s.Type.Is("boolean"):
			return []string{"true", "false", "x"}[g.rng.IntN(3)]
		}
	}
	return g.str(s)
}

// value is a JSON value for s: mostly what it describes, sometimes not.
func (g *reqGen) value(s *openapi3.Schema) any {
	if s == nil || g.depth > 4 {
		return nil
	}
	g.depth++
	defer func() { g.depth-- }()
	if len(s.OneOf) > 0 && g.rng.IntN(4) > 0 {
		return g.merge(s, s.OneOf[g.rng.IntN(len(s.OneOf))].Value)
	}
	if len(s.Enum) > 0 && g.rng.IntN(6) > 0 {
		return s.Enum[g.rng.IntN(len(s.Enum))]
	}
	if g.rng.IntN(12) == 0 { // the wrong type
		return []any{nil, "x", 7, true, []any{}, map[string]any{}}[g.rng.IntN(6)]
	}
	switch {
	case s.Type == nil && len(s.Properties) == 0:
		return g.str(nil)
	case s.Type.Is("object") || len(s.Properties) > 0:
		m := map[string]any{}
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if slices.Contains(s.Required, name) || g.rng.IntN(3) == 0 {
				m[name] = g.value(s.Properties[name].Value)
			}
		}
		return m
	case s.Type.Is("array"):
		var out []any
		for range g.rng.IntN(3) {
			if s.Items != nil {
				out = append(out, g.value(s.Items.Value))
			}
		}
		return out
	case s.Type.Is("integer"):
		return []int64{0, 1, -1, 30, 1 << 20, 1 << 40}[g.rng.IntN(6)]
	case s.Type.Is("number"):
		return []float64{0, 0.5, -1, 30, 1e12}[g.rng.IntN(5)]
	case s.Type.Is("boolean"):
		return g.rng.IntN(2) == 0
	}
	return g.str(s)
}

// merge generates from a oneOf branch within its parent's properties.
func (g *reqGen) merge(parent, branch *openapi3.Schema) any {
	if branch == nil {
		return nil
	}
	if len(parent.Properties) == 0 {
		return g.value(branch)
	}
	c := *parent
	c.OneOf = nil
	c.Required = append(slices.Clone(parent.Required), branch.Required...)
	return g.value(&c)
}

// TestRefusedAsDocumented: what the document refuses, the server refuses
// with 400 saying why: a null body or member, an empty ?format, "tool"
// and "call" together or neither, a malformed ?wait.
func TestRefusedAsDocumented(t *testing.T) {
	t.Parallel()
	h, _ := propertyServer(t)
	for _, tc := range []struct{ method, target, body, want string }{
		{"POST", "/v1/sessions", `null`, "the request body is null"},
		{"POST", "/v1/sessions", `{"ttl_seconds":null}`, `ttl_seconds\" is null`},
		{"POST", "/v1/sessions", `{"limits":{"pids":null}}`, `limits.pids\" is null`},
		{"POST", "/v1/jobs", `null`, "the request body is null"},
		{"POST", "/v1/jobs", `{"tool":"echo","arguments":{"text":"x"},"session_id":null}`, `session_id\" is null`},
		{"POST", "/v1/jobs", `{}`, `missing \"tool\"`},
		{"POST", "/v1/jobs", `{"tool":"echo","call":{"name":"echo"}}`, `call\" excludes`},
		{"POST", "/v1/jobs?wait=soon", `{"tool":"echo","arguments":{"text":"x"}}`, "wait"},
		{"GET", "/v1/tools?format=", "", "format is empty"},
		{"GET", "/v1/tools/echo?format=", "", "format is empty"},
	} {
		req := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkSpec(t, withBody(req, []byte(tc.body)), rec)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s %s %s: %d %s", tc.method, tc.target, tc.body, rec.Code, rec.Body)
		}
		if validRequest(t, withBody(req, []byte(tc.body))) {
			t.Errorf("%s %s %s: the document accepts it", tc.method, tc.target, tc.body)
		}
	}
	// Arguments are the tool's own JSON: null may be a value there.
	req := httptest.NewRequest("POST", "/v1/jobs?wait=true", strings.NewReader(`{"tool":"echo","arguments":{"text":"x","extra":null}}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == 400 && strings.Contains(rec.Body.String(), "is null") {
		t.Errorf("null inside arguments refused: %s", rec.Body)
	}
}
