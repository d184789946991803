// Package dashboard serves sandboxd's built-in web dashboard: one HTML page
// and its script and style, embedded in the binary, served without a key.
// With the API key the user pastes (kept in sessionStorage, sent as a
// Bearer token) the page polls GET /v1/dashboard every two seconds, the
// sandboxd_* metrics scoped to that key, and parses the Prometheus text
// format itself, so every number it shows is one the server reports; it
// also lists pending approvals and decides them through /v1/approvals.
// Without a key it shows nothing.
//
// The assets reference nothing outside the server: no CDN, no web fonts.
package dashboard

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is the URL path under which the assets are served; the page itself
// is served at "/".
const Prefix = "/dashboard/"

// contentSecurityPolicy allows the page to load only its own assets and to
// talk only to its own origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Assets returns the embedded files, rooted so that "index.html" is the page.
func Assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}

// Handler serves GET and HEAD of "/" (the page) and of Prefix+NAME (an
// asset). Anything else is a 404; directories are never listed.
func Handler() http.Handler {
	assets := Assets()
	modTime := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := ""
		switch {
		case r.URL.Path == "/" || r.URL.Path == strings.TrimSuffix(Prefix, "/") || r.URL.Path == Prefix:
			name = "index.html"
		case strings.HasPrefix(r.URL.Path, Prefix):
			name = strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		}
		if name == "" || !fs.ValidPath(name) {
			http.NotFound(w, r)
			return
		}
		data, err := fs.ReadFile(assets, name)
		if err != nil {
			http.NotFound(w, r) // also directories: ReadFile refuses them
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if ct := contentType(name); ct != "" {
			h.Set("Content-Type", ct)
		}
		http.ServeContent(w, r, name, modTime, bytes.NewReader(data))
	})
}

// contentType fixes the types of the asset kinds we ship, independent of
// the host's mime tables.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return ""
}
