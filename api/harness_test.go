package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandboxd/sandboxd/api/apitest"
	"github.com/sandboxd/sandboxd/tools"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// openAPIRouter loads openapi.yaml once, validates the document and
// returns a router to find operations for requests.
func openAPIRouter(t *testing.T) routers.Router {
	t.Helper()
	specOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(OpenAPI)
		if err != nil {
			specErr = err
			return
		}
		if specErr = doc.Validate(context.Background()); specErr != nil {
			return
		}
		doc.Servers = openapi3.Servers{{URL: "http://example.com"}}
		specRouter, specErr = legacy.NewRouter(doc)
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return specRouter
}

// checkSpec validates a real response against openapi.yaml: the status
// must be documented for the operation and the headers and body must match.
func checkSpec(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	router := openAPIRouter(t)
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = "http", "example.com"
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s: not in openapi.yaml: %v", req.Method, req.URL, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: rec.Code,
		Header: rec.Header(),
		Body:   io.NopCloser(strings.NewReader(rec.Body.String())),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s → %d does not match openapi.yaml: %v\nbody: %s", req.Method, req.URL, rec.Code, err, rec.Body.String())
	}
}

// harness is the real handler over a fake service.
type harness struct {
	t    *testing.T
	fake *apitest.Fake
	h    http.Handler
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	fake := apitest.New()
	fake.Reg = testRegistry(t)
	return &harness{t: t, fake: fake, h: New(fake, opts)}
}

// do serves one request (headers as "Name: value" strings) and checks the
// response against openapi.yaml.
func (h *harness) do(method, target, body string, headers ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	rec, req := h.serve(method, target, body, headers...)
	checkSpec(h.t, req, rec)
	return rec
}

// serve serves one request without checking the spec (undocumented routes).
func (h *harness) serve(method, target, body string, headers ...string) (*httptest.ResponseRecorder, *http.Request) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	req = req.WithContext(h.t.Context())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, hv := range headers {
		k, v, _ := strings.Cut(hv, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, req)
	return rec, req
}

// testRegistry returns a registry with an "echo" and a "slow" tool, or nil
// while package tools is still its contract stub (tool tests then skip).
func testRegistry(t testing.TB) (reg *tools.Registry) {
	t.Helper()
	defer func() {
		if recover() != nil {
			reg = nil
		}
	}()
	reg = tools.NewRegistry()
	for _, tl := range []*tools.Tool{
		{
			Name: "echo", Description: "Echo the text back.",
			InputSchema:  []byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			ParallelSafe: true,
			Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
				return tools.Result{OK: true, Content: args["text"].(string)}, nil
			},
		},
		{
			Name: "shell_exec", Description: "Run a command.",
			InputSchema: []byte(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
			Effects:     []tools.Effect{tools.EffectExec},
			Command: func(args map[string]any) (tools.Command, error) {
				return tools.Command{Args: []string{"/bin/sh", "-c", args["command"].(string)}}, nil
			},
		},
	} {
		if err := reg.Register(tl); err != nil {
			t.Fatalf("register %s: %v", tl.Name, err)
		}
	}
	return reg
}

func needRegistry(t *testing.T, h *harness) {
	t.Helper()
	if h.fake.Reg == nil {
		t.Skip("package tools is still the contract stub (no Registry)")
	}
}

var _ JobService = (*apitest.Fake)(nil)

// submit posts a job with headers and returns its ID (fatal unless 2xx).
func (h *harness) submit(body string, headers ...string) string {
	h.t.Helper()
	rec := h.do("POST", "/v1/jobs", body, headers...)
	if rec.Code/100 != 2 {
		h.t.Fatalf("submit %s: %d %s", body, rec.Code, rec.Body)
	}
	var v jobView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		h.t.Fatal(err)
	}
	return v.ID
}
