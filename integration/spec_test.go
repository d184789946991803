//go:build integration

package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandboxd/sandboxd/api"
)

// TestResponsesMatchOpenAPI validates the real daemon's responses (real job
// service, store and runner behind the handler) against api/openapi.yaml.
func TestResponsesMatchOpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	s := startServer(t, "")
	doc.Servers = openapi3.Servers{{URL: s.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	j := s.run("", "bash", map[string]any{"command": "sleep 0.1; echo hi"})

	cases := []struct{ method, path, body string }{
		{"POST", "/v1/jobs?wait=true", `{"tool":"python_repl","arguments":{"code":"6*7"}}`},
		{"POST", "/v1/jobs?wait=true", `{"tool":"python_repl","arguments":{"code":"1/0"}}`},
		{"POST", "/v1/jobs", `{"tool":"bash","arguments":"{'command': 'sleep 5',}"}`},
		{"POST", "/v1/jobs", `{"call":{"type":"tool_use","id":"toolu_1","name":"calculator","input":{"expression":"1+1"}}}`},
		{"POST", "/v1/jobs", `{"tool":"calculator","arguments":{"expression":5}}`},
		{"POST", "/v1/jobs", `{"tool":"nope","arguments":{}}`},
		{"POST", "/v1/jobs", `{"tool":`},
		{"GET", "/v1/jobs/" + j.ID, ""},
		{"GET", "/v1/jobs/job_doesnotexist", ""},
		{"GET", "/v1/jobs?tool=bash&limit=2", ""},
		{"POST", "/v1/jobs/" + j.ID + "/cancel", ""},
		{"GET", "/v1/tools", ""},
		{"GET", "/v1/tools/python_repl?format=anthropic", ""},
		{"GET", "/v1/tools/bash?format=mcp", ""},
		{"GET", "/v1/tools/bash?format=nope", ""},
		{"GET", "/healthz", ""},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var rd io.Reader
			if tc.body != "" {
				rd = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, rd)
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			u, _ := url.Parse(s.URL + tc.path)
			vreq, _ := http.NewRequest(tc.method, u.String(), strings.NewReader(tc.body))
			if tc.body != "" {
				vreq.Header.Set("Content-Type", "application/json")
			}
			route, params, err := router.FindRoute(vreq)
			if err != nil {
				t.Fatalf("not in openapi.yaml: %v", err)
			}
			in := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{
					Request: vreq, PathParams: params, Route: route,
					Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
				},
				Status:  resp.StatusCode,
				Header:  resp.Header,
				Body:    io.NopCloser(bytes.NewReader(body)),
				Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
			}
			if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
				t.Errorf("%d does not match openapi.yaml: %v\nbody: %s", resp.StatusCode, err, body)
			}
		})
	}
}
