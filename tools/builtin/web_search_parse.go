package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// SearchResult is one web_search hit: what the model reads and what the
// structured results (the results.json artifact) hold.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// Search backend formats (tools.web_search.backend.format).
const (
	// SearchFormatHTML is a DuckDuckGo-like HTML results page: anchors of
	// class result__a (the title, href the URL, possibly a /l/?uddg=
	// redirect) each followed by an element of class result__snippet.
	SearchFormatHTML = "html"
	// SearchFormatSearXNG is a SearXNG instance's JSON answer
	// (format=json): {"results":[{"title","url","content"}]}.
	SearchFormatSearXNG = "searxng"
)

// Bounds on what a parsed result keeps.
const (
	maxTitleBytes   = 300
	maxSnippetBytes = 1000
	maxURLBytes     = 2048
)

// parseSearch reads a backend's answer in format, keeping at most max
// results with an http or https URL. It never panics on any input
// (FuzzParseSearch).
func parseSearch(format string, body []byte, max int) ([]SearchResult, error) {
	switch format {
	case SearchFormatSearXNG:
		return parseSearXNG(body, max)
	case SearchFormatHTML, "":
		return parseSearchHTML(body, max), nil
	}
	return nil, fmt.Errorf("unknown search backend format %q", format)
}

func parseSearXNG(body []byte, max int) ([]SearchResult, error) {
	var doc struct {
		Results []struct {
			Title   any `json:"title"`
			URL     any `json:"url"`
			Content any `json:"content"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("the search backend's answer is not SearXNG JSON: %v", err)
	}
	var out []SearchResult
	for _, r := range doc.Results {
		if len(out) >= max {
			break
		}
		title, _ := r.Title.(string)
		u, _ := r.URL.(string)
		snippet, _ := r.Content.(string)
		if res, ok := cleanResult(title, u, snippet); ok {
			out = append(out, res)
		}
	}
	return out, nil
}

// parseSearchHTML walks the page's tokens (no tree is built: a hostile
// page cannot nest its way into deep recursion).
func parseSearchHTML(body []byte, max int) []SearchResult {
	z := html.NewTokenizer(bytes.NewReader(body))
	var (
		out []SearchResult
		// cur is the result being read; in is what its text goes to.
		cur                *SearchResult
		title, snippet     strings.Builder
		inTitle, inSnippet int // nesting depth inside the element, 0: outside
	)
	flush := func() {
		if cur == nil {
			return
		}
		if res, ok := cleanResult(title.String(), cur.URL, snippet.String()); ok && len(out) < max {
			out = append(out, res)
		}
		cur = nil
		title.Reset()
		snippet.Reset()
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			flush()
			return out
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			cls, href := attr(tok, "class"), attr(tok, "href")
			switch {
			case inTitle > 0:
				if tt == html.StartTagToken {
					inTitle++
				}
			case inSnippet > 0:
				if tt == html.StartTagToken {
					inSnippet++
				}
			case hasClass(cls, "result__a") && tok.Data == "a":
				flush()
				if len(out) >= max {
					return out
				}
				cur = &SearchResult{URL: resultURL(href)}
				if tt == html.StartTagToken {
					inTitle = 1
				}
			case hasClass(cls, "result__snippet") && cur != nil:
				if tt == html.StartTagToken {
					inSnippet = 1
				}
			}
		case html.EndTagToken:
			switch {
			case inTitle > 0:
				inTitle--
			case inSnippet > 0:
				inSnippet--
			}
		case html.TextToken:
			switch {
			case inTitle > 0 && title.Len() < 4*maxTitleBytes:
				title.Write(z.Text())
			case inSnippet > 0 && snippet.Len() < 4*maxSnippetBytes:
				snippet.Write(z.Text())
			}
		}
	}
}

func attr(t html.Token, name string) string {
	for _, a := range t.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasClass(cls, want string) bool {
	for _, c := range strings.Fields(cls) {
		if c == want {
			return true
		}
	}
	return false
}

// resultURL undoes a DuckDuckGo-style redirect link (/l/?uddg=TARGET).
func resultURL(href string) string {
	u, err := url.Parse(href)
	if err != nil {
		return href
	}
	if target := u.Query().Get("uddg"); target != "" && strings.HasSuffix(u.Path, "/l/") {
		return target
	}
	if u.Scheme == "" && strings.HasPrefix(href, "//") {
		u.Scheme = "https"
		return u.String()
	}
	return href
}

// cleanResult normalises one hit: whitespace collapsed, lengths bounded,
// valid UTF-8; a hit without an absolute http(s) URL or a title is dropped.
func cleanResult(title, rawURL, snippet string) (SearchResult, bool) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(rawURL) > maxURLBytes {
		return SearchResult{}, false
	}
	r := SearchResult{Title: squeeze(title, maxTitleBytes), URL: u.String(), Snippet: squeeze(snippet, maxSnippetBytes)}
	if r.Title == "" {
		return SearchResult{}, false
	}
	return r, true
}

// squeeze collapses whitespace and cuts s to at most max bytes on a rune
// boundary.
func squeeze(s string, max int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
