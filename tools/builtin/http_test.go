package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

func httpCall(t *testing.T, h *httpHooks, opts *tools.HTTPOptions, args map[string]any) tools.Result {
	t.Helper()
	r, err := httpRequestTool(h).Run(t.Context(), tools.Env{HTTP: opts}, args)
	if err != nil {
		t.Fatalf("infrastructure error: %v", err)
	}
	return r
}

// loopbackGuard lets tests reach the servers they start on loopback,
// through the real address checks.
var loopbackGuard = netclass.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, nil)

var allowPrivate = &tools.HTTPOptions{Guard: loopbackGuard}

func newTestServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Secret-Internal", "not shown")
		fmt.Fprint(w, "hello, world")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s ua=%s x=%s body=%s", r.Method, r.URL.Path, r.UserAgent(), r.Header.Get("X-Test"), b)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusNotFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("é", 100))
	})
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte{0x89, 'P', 'N', 'G', 0, 0, 1})
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/redirect/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if n <= 0 {
			http.Redirect(w, r, "/hello", http.StatusFound)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/redirect/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	srv, _ := newTestServer(t)
	tests := []struct {
		name    string
		opts    *tools.HTTPOptions
		args    map[string]any
		ok      bool
		has     []string
		hasNot  []string
		errHas  string
		bytesIn int64
	}{
		{name: "get", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/hello"}, ok: true,
			has: []string{"HTTP/1.1 200 OK\n", "Content-Type: text/plain; charset=utf-8\n", "\n\nhello, world"}, hasNot: []string{"X-Secret", "Note:"}, bytesIn: 12},
		{name: "post with headers", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/echo", "method": "POST", "body": "payload", "headers": map[string]any{"X-Test": "v1"}}, ok: true,
			has: []string{"POST /echo ua=" + httpUserAgent + " x=v1 body=payload"}},
		{name: "non-2xx is ok", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/missing"}, ok: true,
			has: []string{"HTTP/1.1 404 Not Found", "Note: the server answered 404", "nope"}},
		{name: "head", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/hello", "method": "HEAD"}, ok: true,
			has: []string{"200 OK", "[empty body]"}},
		{name: "truncated", opts: &tools.HTTPOptions{Guard: loopbackGuard, MaxResponseBytes: 11}, args: map[string]any{"url": srv.URL + "/big"}, ok: true,
			has: []string{"ééééé\n[body truncated at 11 B]"}, hasNot: []string{"\uFFFD"}, bytesIn: 11},
		{name: "binary", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/binary"}, ok: true,
			has: []string{"[binary body of 7 bytes not shown]"}},
		{name: "redirects followed", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/redirect/3"}, ok: true,
			has: []string{"200 OK", "Final-URL: " + srv.URL + "/hello", "hello, world"}},
		{name: "too many redirects", opts: &tools.HTTPOptions{Guard: loopbackGuard, MaxRedirects: 2}, args: map[string]any{"url": srv.URL + "/redirect/5"},
			errHas: "stopped after 2 redirects"},
		{name: "default redirect cap", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/redirect/9"},
			errHas: "stopped after 5 redirects"},
		{name: "redirect to file", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/to-file"},
			errHas: "only http and https"},
		{name: "timeout_seconds", opts: &tools.HTTPOptions{Guard: loopbackGuard, Timeout: 300 * time.Millisecond}, args: map[string]any{"url": srv.URL + "/slow", "timeout_seconds": 30.0},
			errHas: "timed out after 300ms"},
		{name: "refused header", opts: allowPrivate, args: map[string]any{"url": srv.URL + "/echo", "headers": map[string]any{"host": "evil"}},
			errHas: "set by the client"},
		{name: "bad scheme", opts: allowPrivate, args: map[string]any{"url": "file:///etc/passwd"}, errHas: "scheme \"file\""},
		{name: "gopher", opts: allowPrivate, args: map[string]any{"url": "gopher://127.0.0.1:70/"}, errHas: "scheme"},
		{name: "no host", opts: allowPrivate, args: map[string]any{"url": "http:///x"}, errHas: "no host"},
		{name: "relative", opts: allowPrivate, args: map[string]any{"url": "/hello"}, errHas: "scheme"},
		{name: "connection refused", opts: allowPrivate, args: map[string]any{"url": "http://127.0.0.1:1/"}, errHas: "request failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httpCall(t, nil, tc.opts, tc.args)
			if r.OK != (tc.errHas == "") {
				t.Fatalf("ok=%v err=%q content=%q", r.OK, r.Error, r.Content)
			}
			if !strings.Contains(r.Error, tc.errHas) {
				t.Errorf("error %q, want %q", r.Error, tc.errHas)
			}
			for _, s := range tc.has {
				if !strings.Contains(r.Content, s) {
					t.Errorf("content lacks %q:\n%s", s, r.Content)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(r.Content, s) {
					t.Errorf("content has %q:\n%s", s, r.Content)
				}
			}
			if tc.bytesIn != 0 && r.Usage.BytesIn != tc.bytesIn {
				t.Errorf("BytesIn %d, want %d", r.Usage.BytesIn, tc.bytesIn)
			}
			if r.OK && !slices.Equal(r.Effects, []tools.Effect{tools.EffectHTTP}) {
				t.Errorf("effects %v", r.Effects)
			}
		})
	}
}

func TestHTTPRequestUsage(t *testing.T) {
	t.Parallel()
	srv, _ := newTestServer(t)
	r := httpCall(t, nil, allowPrivate, map[string]any{"url": srv.URL + "/echo", "method": "PUT", "body": "12345"})
	if !r.OK || r.Usage.BytesOut != 5 || r.Usage.BytesIn != int64(len("PUT /echo ua="+httpUserAgent+" x= body=12345")) {
		t.Errorf("%+v", r)
	}
}

func TestHTTPRequestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %v", r.TLS != nil)
	}))
	t.Cleanup(srv.Close)
	hooks := &httpHooks{tls: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	r := httpCall(t, hooks, allowPrivate, map[string]any{"url": srv.URL})
	if !r.OK || !strings.Contains(r.Content, "tls true") {
		t.Errorf("%+v", r)
	}
	// Without the test CA the certificate is refused.
	r = httpCall(t, nil, allowPrivate, map[string]any{"url": srv.URL})
	if r.OK || !strings.Contains(r.Error, "certificate") {
		t.Errorf("untrusted certificate accepted: %+v", r)
	}
}

// TestHTTPRequestRefusesPrivate runs with the guard on against a live
// loopback server: every spelling must be refused before any connection, so
// the server sees no request.
func TestHTTPRequestRefusesPrivate(t *testing.T) {
	t.Parallel()
	srv, hits := newTestServer(t)
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	// A resolver that answers private addresses, as a rebinding attacker's
	// DNS would.
	hooks := &httpHooks{lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "rebind.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "multi.test":
			return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("169.254.169.254")}, nil
		case "mapped.test":
			return []netip.Addr{netip.MustParseAddr("::ffff:7f00:1")}, nil
		}
		return nil, errors.New("no such host in test resolver")
	}}
	for _, host := range []string{
		"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::1]",
		"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "localhost", "LocalHost.",
		"0.0.0.0", "0", "rebind.test", "multi.test", "mapped.test", "169.254.169.254", "[fd00:ec2::254]",
	} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			r := httpCall(t, hooks, &tools.HTTPOptions{}, map[string]any{"url": "http://" + host + ":" + port + "/hello"})
			if r.OK || !strings.Contains(r.Error, "refused by the SSRF guard") {
				t.Errorf("not refused: %+v", r)
			}
			if len(r.Effects) != 0 {
				t.Errorf("a refused request spent %v", r.Effects)
			}
		})
	}
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("the loopback server received %d requests with the guard on", n)
		}
	})
}

func TestCheckRedirect(t *testing.T) {
	t.Parallel()
	g := newSSRFGuard(nil, nil)
	check := g.checkRedirect(5)
	via := []*http.Request{{}}
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"https://example.com/next", ""},
		{"http://93.184.216.34/", ""},
		{"http://127.0.0.1/", "loopback"},
		{"http://127.1:8080/", "loopback"},
		{"http://2130706433/", "loopback"},
		{"http://[::ffff:127.0.0.1]/", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
		{"http://[fd00:ec2::254]/", "metadata"},
		{"http://10.0.0.5/", "private"},
		{"http://192.168.1.1/", "private"},
		{"http://localhost/", "loopback"},
		{"file:///etc/passwd", "only http and https"},
		{"gopher://example.com/", "only http and https"},
	} {
		req := &http.Request{URL: mustURL(t, tc.url)}
		err := check(req, via)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("redirect to %s: %v, want %q", tc.url, err, tc.want)
		}
	}
	req := &http.Request{URL: mustURL(t, "https://example.com/")}
	if err := check(req, make([]*http.Request, 6)); err == nil || !strings.Contains(err.Error(), "stopped after 5 redirects") {
		t.Errorf("hop limit: %v", err)
	}
	if err := check(req, make([]*http.Request, 5)); err != nil {
		t.Errorf("5th redirect refused: %v", err)
	}
	// A guard allowing loopback opens it, never another scheme.
	open := newSSRFGuard(loopbackGuard, nil).checkRedirect(5)
	if err := open(&http.Request{URL: mustURL(t, "http://127.0.0.1/")}, via); err != nil {
		t.Errorf("loopback allowed: %v", err)
	}
	if err := open(&http.Request{URL: mustURL(t, "file:///x")}, via); err == nil {
		t.Error("file:// allowed")
	}
	if err := open(&http.Request{URL: mustURL(t, "http://0.0.0.0/")}, via); err == nil {
		t.Error("redirect to 0.0.0.0 allowed")
	}
}

func TestDialControl(t *testing.T) {
	t.Parallel()
	g := newSSRFGuard(nil, nil)
	for addr, refused := range map[string]bool{
		"127.0.0.1:80":               true,
		"[::1]:443":                  true,
		"[::ffff:127.0.0.1]:80":      true,
		"169.254.169.254:80":         true,
		"10.1.2.3:8080":              true,
		"[fe80::1%eth0]:80":          true,
		"0.0.0.0:80":                 true,
		"[::]:80":                    true,
		"8.8.8.8:443":                false,
		"[2606:4700:4700::1111]:443": false,
		"garbage":                    true,
	} {
		err := g.g.Control("tcp", addr, nil)
		var re *netclass.Refusal
		if refused != (err != nil) || refused && !errors.As(err, &re) {
			t.Errorf("control(%s) = %v, want refused=%v", addr, err, refused)
		}
	}
	if err := newSSRFGuard(loopbackGuard, nil).g.Control("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("loopback guard control: %v", err)
	}
}

// TestDialRefusesBeforeConnecting checks the dialer with a resolver
// answering only private addresses: it must refuse without dialling.
func TestDialRefusesBeforeConnecting(t *testing.T) {
	t.Parallel()
	var dialled atomic.Bool
	g := newSSRFGuard(nil, func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("0.0.0.0")}, nil
	})
	g.d.Connected = func(netip.AddrPort) { dialled.Store(true) }
	_, err := g.dialContext(t.Context(), "tcp", "internal.test:80")
	// A bare refusal (not joined with dial errors): nothing was dialled.
	if _, ok := err.(*netclass.Refusal); !ok || dialled.Load() {
		t.Errorf("err %v, dialled %v", err, dialled.Load())
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Env.HTTP.Allow (the tenant's egress allowlist) is asked before the
// request and before every redirect.
func TestHTTPRequestAllowlist(t *testing.T) {
	t.Parallel()
	srv, hits := newTestServer(t)
	tool := httpRequestTool(&httpHooks{})
	var asked []string
	opts := &tools.HTTPOptions{Guard: loopbackGuard, Allow: func(method, host string, port int) error {
		asked = append(asked, fmt.Sprintf("%s %s:%d", method, host, port))
		if len(asked) > 1 {
			return errors.New("not in the allowlist")
		}
		return nil
	}}
	res, err := tool.Run(t.Context(), tools.Env{HTTP: opts}, map[string]any{"url": srv.URL + "/redirect/1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !strings.Contains(res.Error, "not in the allowlist") {
		t.Fatalf("redirect past the allowlist: %+v", res)
	}
	u, _ := url.Parse(srv.URL)
	if len(asked) != 2 || asked[0] != "GET "+u.Host {
		t.Fatalf("asked %q", asked)
	}
	n := hits.Load()
	opts.Allow = func(string, string, int) error { return errors.New("nothing allowed") }
	res, _ = tool.Run(t.Context(), tools.Env{HTTP: opts}, map[string]any{"url": srv.URL + "/hello"})
	if res.OK || !strings.Contains(res.Error, "request refused: nothing allowed") || hits.Load() != n {
		t.Fatalf("refused request: %+v (server hits %d)", res, hits.Load()-n)
	}
}
