//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestWebSearch: web_search (and its alias duckduckgo_search) asks the
// configured backend, a search server this test starts on loopback, for
// a tenant whose egress policy allows it (allow_private_cidrs for the
// loopback address, the host and port in its allowlist); a tenant without
// that allowance is refused before any connection. Both backend formats.
func TestWebSearch(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		q := r.URL.Query().Get("q")
		if r.URL.Path == "/searx/search" {
			fmt.Fprintf(w, `{"results":[{"title":"SearX on %s","url":"https://example.org/searx","content":"lang %s"}]}`, q, r.URL.Query().Get("language"))
			return
		}
		fmt.Fprintf(w, `<html><body><div class="result"><a class="result__a" href="//duckduckgo.com/l/?uddg=https%%3A%%2F%%2Fexample.org%%2F1">About %s</a>
<a class="result__snippet">first hit, region %s</a></div>
<div class="result"><a class="result__a" href="https://example.org/2">Second</a><span class="result__snippet">two</span></div></body></html>`, q, r.URL.Query().Get("kl"))
	}))
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port

	cfg := func(path, format string) string {
		return fmt.Sprintf(`
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      egress:
        allow:
          - host: 127.0.0.1
            ports: [%d]
            methods: [GET]
        allow_private_cidrs: [127.0.0.1/32]
  - name: closed
    api_keys: [k-closed]
    policy:
      egress:
        allow:
          - host: example.org
  - name: open
    api_keys: [k-open]
tools:
  web_search:
    backend: {url: "%s%s", format: %s}
`, port, srv.URL, path, format)
	}

	s := startServer(t, cfg("/html/", "html"))
	j := s.run("k-acme", "web_search", map[string]any{"query": "sandboxes", "count": 1, "region": "us-en"})
	if !j.Result.OK || !strings.Contains(j.Result.Content, "1. About sandboxes\n   https://example.org/1\n   first hit, region us-en") ||
		strings.Contains(j.Result.Content, "Second") {
		t.Fatalf("web_search: %+v", j.Result)
	}
	if len(j.Result.Artifacts) != 1 || j.Result.Artifacts[0].Name != "results.json" {
		t.Errorf("artifacts: %+v", j.Result.Artifacts)
	}
	if j.Tool != "web_search" || len(j.Result.Effects) != 1 || j.Result.Effects[0] != "http" {
		t.Errorf("job: tool %s effects %v", j.Tool, j.Result.Effects)
	}
	var art []byte
	_, art = s.do("GET", "/v1/jobs/"+j.ID+"/artifacts/results.json", "k-acme", nil, nil)
	if !strings.Contains(string(art), `"url":"https://example.org/1"`) || !strings.Contains(string(art), `"query":"sandboxes"`) {
		t.Errorf("results.json: %s", art)
	}
	// The same search again within tools.web_search.cache_ttl (5m by
	// default): answered from the result cache, the backend not asked.
	before := hits.Load()
	if again := s.run("k-acme", "web_search", map[string]any{"query": "sandboxes", "count": 1, "region": "us-en"}); !again.Cached ||
		again.Result.Content != j.Result.Content || hits.Load() != before {
		t.Errorf("repeated search: cached %v, backend asked %d more times", again.Cached, hits.Load()-before)
	}
	if j := s.run("k-acme", "duckduckgo_search", map[string]any{"query": "alias"}); !j.Result.OK || j.Tool != "web_search" ||
		!strings.Contains(j.Result.Content, "2. Second") {
		t.Errorf("duckduckgo_search: %s %+v", j.Tool, j.Result)
	}
	n := hits.Load()
	if j := s.run("k-closed", "web_search", map[string]any{"query": "x"}); j.Result.OK || !strings.Contains(j.Result.Error, "refused") {
		t.Errorf("a tenant whose allowlist lacks the backend: %+v", j.Result)
	}
	if j := s.run("k-open", "web_search", map[string]any{"query": "x"}); j.Result.OK || !strings.Contains(j.Result.Error, "SSRF guard") {
		t.Errorf("a tenant without allow_private_cidrs: %+v", j.Result)
	}
	if hits.Load() != n {
		t.Errorf("refused searches reached the backend (%d requests)", hits.Load()-n)
	}
	s.stop(syscall.SIGTERM)

	s = startServer(t, cfg("/searx/search", "searxng"))
	if j := s.run("k-acme", "web_search", map[string]any{"query": "meta", "region": "de"}); !j.Result.OK ||
		!strings.Contains(j.Result.Content, "SearX on meta") || !strings.Contains(j.Result.Content, "lang de") {
		t.Errorf("searxng: %+v", j.Result)
	}
}
