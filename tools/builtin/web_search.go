package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// WebSearchOptions configure web_search (tools.web_search.*). The tool
// exists only with a Backend.
type WebSearchOptions struct {
	// Backend is the search endpoint: an http or https URL, its query
	// string kept; the query goes in q.
	Backend string
	// Format is SearchFormatHTML (default) or SearchFormatSearXNG.
	Format string
	// MaxResults is the ceiling of count. Default 10.
	MaxResults int
	// MaxResponseBytes caps the backend's answer read. Default 2 MiB.
	MaxResponseBytes int64
	// CacheTTL, when positive, lets identical searches of a tenant answer
	// from the result cache for that long.
	CacheTTL time.Duration
}

// Web search defaults.
const (
	DefaultWebSearchMaxResults = 10
	defaultWebSearchCount      = 5
	defaultWebSearchBody       = 2 << 20
	webSearchUserAgent         = "sandboxd-web_search/1"
)

// WebSearchTool is web_search against o.Backend. Like http_request it runs
// in-process and connects only through the tenant's address guard and
// egress allowlist (tools.Env.HTTP); Env.HTTP's Timeout bounds a search.
func WebSearchTool(o WebSearchOptions) *tools.Tool { return webSearchTool(o, nil) }

func webSearchTool(o WebSearchOptions, h *httpHooks) *tools.Tool {
	if h == nil {
		h = &httpHooks{}
	}
	if o.MaxResults <= 0 {
		o.MaxResults = DefaultWebSearchMaxResults
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = defaultWebSearchBody
	}
	if o.Format == "" {
		o.Format = SearchFormatHTML
	}
	var cache *tools.CachePolicy
	if o.CacheTTL > 0 {
		cache = &tools.CachePolicy{TTL: o.CacheTTL, HTTPReadOnly: true}
	}
	return &tools.Tool{
		Cache: cache,
		Name:  "web_search",
		Description: "Search the web. Returns the top results, each with its title, URL and a snippet. " +
			"Use it for facts you do not know or that may have changed; then fetch a page with http_request if needed.",
		InputSchema: objectSchema(map[string]any{
			"query": map[string]any{"type": "string", "minLength": 1, "maxLength": 500, "description": "What to search for."},
			"count": map[string]any{"type": "integer", "minimum": 1, "maximum": o.MaxResults,
				"description": fmt.Sprintf("How many results (default %d, at most %d).", min(defaultWebSearchCount, o.MaxResults), o.MaxResults)},
			"region": map[string]any{"type": "string", "pattern": `^[A-Za-z]{2}(-[A-Za-z]{2})?$`,
				"description": "A region/language such as us-en or de-de (the backend's default when absent)."},
		}, "query"),
		Effects:      []tools.Effect{tools.EffectHTTP},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runWebSearch(ctx, env, o, h, args), nil
		},
	}
}

// searchURL is the backend request for a query.
func searchURL(o WebSearchOptions, query, region string) (*url.URL, error) {
	u, err := url.Parse(o.Backend)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("q", query)
	switch o.Format {
	case SearchFormatSearXNG:
		q.Set("format", "json")
		if region != "" {
			q.Set("language", region)
		}
	default:
		if region != "" {
			q.Set("kl", strings.ToLower(region))
		}
	}
	u.RawQuery = q.Encode()
	return u, nil
}

func runWebSearch(ctx context.Context, env tools.Env, o WebSearchOptions, h *httpHooks, args map[string]any) tools.Result {
	start := time.Now()
	lim := limitsFrom(env.HTTP, nil)
	query := strings.TrimSpace(argString(args, "query", ""))
	if query == "" {
		return errResult(start, "query is empty")
	}
	count := min(defaultWebSearchCount, o.MaxResults)
	if f, ok := argFloat(args, "count"); ok && f >= 1 {
		count = min(int(f), o.MaxResults)
	}
	u, err := searchURL(o, query, argString(args, "region", ""))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errResult(start, "the search backend is misconfigured")
	}
	g := newSSRFGuard(lim.guard, h.lookup)
	g.d.Dial = h.dial
	if err := g.g.CheckURL(u); err != nil {
		return errResult(start, "search refused by the SSRF guard: "+err.Error())
	}
	if env.HTTP != nil && env.HTTP.Allow != nil {
		if err := env.HTTP.Allow(http.MethodGet, u.Hostname(), urlPort(u)); err != nil {
			return errResult(start, "search refused: "+err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lim.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), http.NoBody)
	if err != nil {
		return errResult(start, "invalid search request: "+err.Error())
	}
	req.Header.Set("User-Agent", webSearchUserAgent)
	req.Header.Set("Accept", "text/html, application/json")
	tr := &http.Transport{
		Proxy: nil, DialContext: g.dialContext, ForceAttemptHTTP2: true, TLSClientConfig: h.tls,
		TLSHandshakeTimeout: lim.timeout, MaxResponseHeaderBytes: 64 << 10, DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: lim.timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a backend answers; it does not send us elsewhere
	}}
	resp, err := client.Do(req)
	if err != nil {
		var eff []tools.Effect
		if g.connected.Load() {
			eff = []tools.Effect{tools.EffectHTTP}
		}
		return errResult(start, "search failed: "+describeHTTPError(err, lim.timeout), eff...)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxResponseBytes))
	if err != nil {
		return errResult(start, "reading the search backend's answer: "+describeHTTPError(err, lim.timeout), tools.EffectHTTP)
	}
	if resp.StatusCode != http.StatusOK {
		return errResult(start, fmt.Sprintf("the search backend answered %s", resp.Status), tools.EffectHTTP)
	}
	results, err := parseSearch(o.Format, body, count)
	if err != nil {
		return errResult(start, err.Error(), tools.EffectHTTP)
	}
	data, _ := json.Marshal(struct {
		Query   string         `json:"query"`
		Results []SearchResult `json:"results"`
	}{query, append([]SearchResult{}, results...)})
	r := okResult(start, formatSearch(query, results), tools.EffectHTTP)
	r.Artifacts = []tools.Artifact{{Name: "results.json", MimeType: "application/json", Size: int64(len(data)), Data: data}}
	r.Usage.BytesIn = int64(len(body))
	return r
}

// formatSearch is the text the model reads.
func formatSearch(query string, results []SearchResult) string {
	if len(results) == 0 {
		return fmt.Sprintf("No results for %q.", query)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Results for %q:\n", query)
	for i, r := range results {
		fmt.Fprintf(&b, "\n%d. %s\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", r.Snippet)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
