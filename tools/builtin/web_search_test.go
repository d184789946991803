package builtin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/tools"
)

// ddgPage is a results page shaped like DuckDuckGo's HTML endpoint.
const ddgPage = `<!DOCTYPE html><html><body><div id="links">
<div class="result results_links web-result"><h2 class="result__title">
<a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fgo.dev%2Fdoc%2F&amp;rut=x">The <b>Go</b> Programming Language</a></h2>
<a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fgo.dev%2Fdoc%2F">Documentation &amp; tutorials for <b>Go</b>.</a></div>
<div class="result"><a class="result__a" href="https://example.org/a">Example A</a><div class="result__snippet">Snippet   A</div></div>
<div class="result"><a class="result__a" href="javascript:alert(1)">Dropped</a></div>
<div class="result"><a class="result__a" href="https://example.org/c">Example C</a></div>
</div></body></html>`

func TestParseSearchHTML(t *testing.T) {
	t.Parallel()
	got := parseSearchHTML([]byte(ddgPage), 10)
	want := []SearchResult{
		{"The Go Programming Language", "https://go.dev/doc/", "Documentation & tutorials for Go."},
		{"Example A", "https://example.org/a", "Snippet A"},
		{"Example C", "https://example.org/c", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := parseSearchHTML([]byte(ddgPage), 2); len(got) != 2 {
		t.Fatalf("max 2: %d results", len(got))
	}
}

func TestParseSearXNG(t *testing.T) {
	t.Parallel()
	body := `{"query":"go","results":[{"title":"Go","url":"https://go.dev/","content":"The Go language"},
		{"title":"bad","url":"ftp://x/"},{"title":7,"url":"https://x/"},{"title":"B","url":"http://example.org/b"}]}`
	got, err := parseSearch(SearchFormatSearXNG, []byte(body), 10)
	want := []SearchResult{{"Go", "https://go.dev/", "The Go language"}, {"B", "http://example.org/b", ""}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
	if _, err := parseSearch(SearchFormatSearXNG, []byte("<html>"), 10); err == nil {
		t.Fatal("HTML parsed as SearXNG JSON")
	}
}

// TestWebSearch runs the tool against a backend on loopback (allowed by
// the test's guard, as http_request's tests are): the query, count and
// region reach it, the results come back as text and as results.json;
// the address guard and the allowlist refuse before connecting.
func TestWebSearch(t *testing.T) {
	t.Parallel()
	var last atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.URL.RawQuery)
		if r.URL.Query().Get("format") == "json" {
			fmt.Fprint(w, `{"results":[{"title":"One","url":"https://example.org/1","content":"first"},{"title":"Two","url":"https://example.org/2"}]}`)
			return
		}
		fmt.Fprint(w, ddgPage)
	}))
	t.Cleanup(srv.Close)

	run := func(o WebSearchOptions, opts *tools.HTTPOptions, args map[string]any) tools.Result {
		t.Helper()
		r, err := webSearchTool(o, nil).Run(t.Context(), tools.Env{HTTP: opts}, args)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run(WebSearchOptions{Backend: srv.URL + "/html/?x=1"}, allowPrivate, map[string]any{"query": "golang docs", "count": 2.0, "region": "de-de"})
	if !r.OK || !strings.Contains(r.Content, "1. The Go Programming Language\n   https://go.dev/doc/") || strings.Contains(r.Content, "Example C") {
		t.Fatalf("html: %+v", r)
	}
	q, _ := url.ParseQuery(last.Load().(string))
	if q.Get("q") != "golang docs" || q.Get("kl") != "de-de" || q.Get("x") != "1" {
		t.Errorf("backend query %v", q)
	}
	if len(r.Artifacts) != 1 || r.Artifacts[0].Name != "results.json" {
		t.Fatalf("artifacts %+v", r.Artifacts)
	}
	var data struct {
		Results []SearchResult `json:"results"`
	}
	if err := json.Unmarshal(r.Artifacts[0].Data, &data); err != nil || len(data.Results) != 2 || data.Results[1].URL != "https://example.org/a" {
		t.Errorf("results.json %s %v", r.Artifacts[0].Data, err)
	}
	if len(r.Effects) != 1 || r.Effects[0] != tools.EffectHTTP {
		t.Errorf("effects %v", r.Effects)
	}

	r = run(WebSearchOptions{Backend: srv.URL, Format: SearchFormatSearXNG}, allowPrivate, map[string]any{"query": "one", "region": "en"})
	q, _ = url.ParseQuery(last.Load().(string))
	if !r.OK || !strings.Contains(r.Content, "2. Two") || q.Get("language") != "en" || q.Get("format") != "json" {
		t.Errorf("searxng: %+v %v", r, q)
	}

	before := last.Load()
	if r := run(WebSearchOptions{Backend: srv.URL}, nil, map[string]any{"query": "x"}); r.OK || !strings.Contains(r.Error, "SSRF guard") || len(r.Effects) != 0 {
		t.Errorf("loopback without the guard's allowance: %+v", r)
	}
	deny := &tools.HTTPOptions{Guard: loopbackGuard, Allow: func(string, string, int) error { return fmt.Errorf("not in the allowlist") }}
	if r := run(WebSearchOptions{Backend: srv.URL}, deny, map[string]any{"query": "x"}); r.OK || !strings.Contains(r.Error, "allowlist") {
		t.Errorf("refused by the allowlist: %+v", r)
	}
	if last.Load() != before {
		t.Error("a refused search reached the backend")
	}
}

// FuzzParseSearch: the backend's answer is untrusted; parsing never
// panics and keeps only bounded http(s) results.
func FuzzParseSearch(f *testing.F) {
	f.Add([]byte(ddgPage), false)
	f.Add([]byte(`{"results":[{"title":"a","url":"https://x/","content":"c"}]}`), true)
	f.Add([]byte(`<a class="result__a" href="https://x/"><a class="result__a" href="//y/l/?uddg=http://z/">`), false)
	f.Fuzz(func(t *testing.T, body []byte, searx bool) {
		format := SearchFormatHTML
		if searx {
			format = SearchFormatSearXNG
		}
		res, _ := parseSearch(format, body, 5)
		if len(res) > 5 {
			t.Fatalf("%d results", len(res))
		}
		for _, r := range res {
			u, err := url.Parse(r.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || r.Title == "" ||
				len(r.Title) > maxTitleBytes+len("…") || len(r.Snippet) > maxSnippetBytes+len("…") {
				t.Fatalf("bad result %+v", r)
			}
		}
	})
}
