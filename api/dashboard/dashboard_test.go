package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandlerServesAssets(t *testing.T) {
	t.Parallel()
	h := Handler()
	cases := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/dashboard/dashboard.js"`},
		{"/dashboard/", "text/html; charset=utf-8", "<title>sandboxd</title>"},
		{"/dashboard/index.html", "text/html; charset=utf-8", "<title>sandboxd</title>"},
		{"/dashboard/dashboard.js", "text/javascript; charset=utf-8", "/v1/dashboard"},
		{"/dashboard/prom.js", "text/javascript; charset=utf-8", "function parse("},
		{"/dashboard/dashboard.css", "text/css; charset=utf-8", "font-variant-numeric"},
		{"/dashboard/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d", rec.Code)
			}
			if got := rec.Header().Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no X-Content-Type-Options: nosniff")
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if !strings.Contains(rec.Body.String(), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
		})
	}
}

func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	h := Handler()
	cases := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/dashboard/missing.js", http.StatusNotFound},
		{http.MethodGet, "/dashboard/../dashboard.go", http.StatusNotFound},
		{http.MethodGet, "/dashboard/%2e%2e/dashboard.go", http.StatusNotFound},
		{http.MethodGet, "/other", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, rec.Code, tc.status)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD /: status %d, %d body bytes", rec.Code, rec.Body.Len())
	}
}

// The machine the dashboard runs on may be offline and the page must not
// leak anything to third parties: no asset may name an absolute URL, a
// protocol-relative one or an @import. The SVG namespace name is an
// identifier, never fetched.
func TestAssetsHaveNoExternalURLs(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{"http://www.w3.org/2000/svg": true}
	urlRE := regexp.MustCompile(`(?i)\b(?:https?|wss?|ftp)://[^\s"'<>)]*|(?:src|href|url)\s*[=(]\s*["']?//[^\s"'<>)]*|@import`)
	n := 0
	err := fs.WalkDir(Assets(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		f, err := Assets().Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			return err
		}
		for _, m := range urlRE.FindAllString(string(data), -1) {
			if !allowed[m] {
				t.Errorf("%s names an external URL: %q", name, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d assets embedded", n)
	}
}

// The page references only assets that exist.
func TestIndexReferencesExist(t *testing.T) {
	t.Parallel()
	index, err := fs.ReadFile(Assets(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/dashboard/[^"]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references %d assets", len(refs))
	}
	for _, m := range refs {
		if _, err := fs.Stat(Assets(), strings.TrimPrefix(m[1], Prefix)); err != nil {
			t.Errorf("index.html references %s: %v", m[1], err)
		}
	}
}
