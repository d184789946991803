package builtin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

// HTTP defaults, used when Env.HTTP or one of its fields is zero.
const (
	DefaultHTTPMaxResponseBytes = 1 << 20
	DefaultHTTPTimeout          = 30 * time.Second
	DefaultHTTPMaxRedirects     = 5
	maxHTTPTimeoutSeconds       = 60
	httpUserAgent               = "sandboxd-http_request/1"
)

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// refusedRequestHeaders are set by the client itself; letting a model set
// them would allow request smuggling or virtual-host games.
var refusedRequestHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Proxy-Authorization": true, "Proxy-Connection": true,
}

// shownResponseHeaders are the response headers the model reads.
var shownResponseHeaders = []string{
	"Content-Type", "Content-Length", "Content-Encoding", "Location", "Retry-After",
	"Last-Modified", "Etag", "Cache-Control", "Www-Authenticate",
}

// httpHooks lets tests replace the resolver and TLS roots; nil in
// production.
type httpHooks struct {
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	tls    *tls.Config
	// dial connects to a checked address (netclass.Dialer.Dial).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func httpRequestTool(h *httpHooks) *tools.Tool {
	if h == nil {
		h = &httpHooks{}
	}
	return &tools.Tool{
		Name: "http_request",
		Description: "Make an HTTP or HTTPS request to a public internet address and return the status line, the main response headers and the body as text " +
			"(capped, 1 MiB by default, with a note when truncated). Private, loopback, link-local and cloud-metadata addresses are refused. " +
			"Redirects are followed (5 at most by default). A non-2xx status is still a completed request; network failures are errors.",
		InputSchema: objectSchema(map[string]any{
			"url": map[string]any{"type": "string", "minLength": 1, "maxLength": 8192, "description": "Absolute http:// or https:// URL."},
			"method": map[string]any{
				"type": "string", "enum": httpMethods,
				"description": "HTTP method. Default GET.",
			},
			"headers": map[string]any{
				"type":                 "object",
				"additionalProperties": map[string]any{"type": "string", "maxLength": 8192},
				"maxProperties":        64,
				"description":          "Request headers as name → value. Host, Content-Length, Transfer-Encoding, Connection and proxy headers are set by the client and refused.",
			},
			"body": map[string]any{"type": "string", "maxLength": 10 << 20, "description": "Request body, sent as is (set Content-Type in headers)."},
			"timeout_seconds": map[string]any{
				"type": "number", "minimum": 1, "maximum": maxHTTPTimeoutSeconds,
				"description": "Limit on the whole request, redirects included, in seconds. Default and ceiling: the server's limit (30s unless configured).",
			},
		}, "url"),
		Effects:      []tools.Effect{tools.EffectHTTP},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runHTTPRequest(ctx, env, h, args), nil
		},
	}
}

type httpLimits struct {
	maxBody      int64
	timeout      time.Duration
	maxRedirects int
	guard        *netclass.Guard
}

func limitsFrom(o *tools.HTTPOptions, args map[string]any) httpLimits {
	l := httpLimits{maxBody: DefaultHTTPMaxResponseBytes, timeout: DefaultHTTPTimeout, maxRedirects: DefaultHTTPMaxRedirects}
	if o != nil {
		if o.MaxResponseBytes > 0 {
			l.maxBody = o.MaxResponseBytes
		}
		if o.Timeout > 0 {
			l.timeout = o.Timeout
		}
		switch {
		case o.MaxRedirects > 0:
			l.maxRedirects = o.MaxRedirects
		case o.MaxRedirects < 0:
			l.maxRedirects = 0 // negative: follow none
		}
		l.guard = o.Guard
	}
	if f, ok := argFloat(args, "timeout_seconds"); ok && f > 0 {
		if d := time.Duration(f * float64(time.Second)); d < l.timeout {
			l.timeout = d
		}
	}
	return l
}

func runHTTPRequest(ctx context.Context, env tools.Env, h *httpHooks, args map[string]any) tools.Result {
	start := time.Now()
	lim := limitsFrom(env.HTTP, args)

	raw := argString(args, "url", "")
	u, err := url.Parse(raw)
	if err != nil {
		return errResult(start, fmt.Sprintf("invalid URL: %v", err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errResult(start, fmt.Sprintf("URL scheme %q is not allowed: use http or https", u.Scheme))
	}
	if u.Host == "" {
		return errResult(start, "URL has no host")
	}
	g := newSSRFGuard(lim.guard, h.lookup)
	g.d.Dial = h.dial
	if err := g.g.CheckURL(u); err != nil {
		return errResult(start, "request refused by the SSRF guard: "+err.Error())
	}
	method := strings.ToUpper(argString(args, "method", "GET"))
	if !contains(httpMethods, method) {
		return errResult(start, fmt.Sprintf("method %q is not allowed: use one of %s", method, strings.Join(httpMethods, ", ")))
	}
	var allow func(method, host string, port int) error
	if env.HTTP != nil {
		allow = env.HTTP.Allow
	}
	if allow != nil {
		if err := allow(method, u.Hostname(), urlPort(u)); err != nil {
			return errResult(start, "request refused: "+err.Error())
		}
	}
	body := argString(args, "body", "")

	ctx, cancel := context.WithTimeout(ctx, lim.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(body))
	if err != nil {
		return errResult(start, fmt.Sprintf("invalid request: %v", err))
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	req.Header.Set("User-Agent", httpUserAgent)
	if hdrs, ok := args["headers"].(map[string]any); ok {
		for k, v := range hdrs {
			s, ok := v.(string)
			if !ok {
				return errResult(start, fmt.Sprintf("header %q: value must be a string", k))
			}
			ck := http.CanonicalHeaderKey(k)
			if refusedRequestHeaders[ck] || strings.HasPrefix(ck, "Proxy-") {
				return errResult(start, fmt.Sprintf("header %q is set by the client and cannot be given", k))
			}
			req.Header.Set(k, s)
		}
	}

	tr := &http.Transport{
		Proxy:                  nil, // never a proxy from the environment
		DialContext:            g.dialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        h.tls,
		TLSHandshakeTimeout:    lim.timeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableKeepAlives:      true,
	}
	defer tr.CloseIdleConnections()
	checkRedirect := g.checkRedirect(lim.maxRedirects)
	client := &http.Client{Transport: tr, Timeout: lim.timeout, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if err := checkRedirect(r, via); err != nil {
			return err
		}
		if allow != nil {
			if err := allow(r.Method, r.URL.Hostname(), urlPort(r.URL)); err != nil {
				return &netclass.Refusal{Host: r.URL.Hostname(), Reason: fmt.Sprintf("redirect to %s: %v", r.URL.Redacted(), err)}
			}
		}
		return nil
	}}

	resp, err := client.Do(req)
	if err != nil {
		if !g.connected.Load() {
			return errResult(start, describeHTTPError(err, lim.timeout))
		}
		r := errResult(start, describeHTTPError(err, lim.timeout), tools.EffectHTTP)
		r.Usage.BytesOut = int64(len(body))
		return r
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, lim.maxBody+1))
	truncated := int64(len(data)) > lim.maxBody
	if truncated {
		data = data[:lim.maxBody]
	}
	if err != nil && !truncated {
		r := errResult(start, "reading the response body: "+describeHTTPError(err, lim.timeout), tools.EffectHTTP)
		r.Usage.BytesOut, r.Usage.BytesIn = int64(len(body)), int64(len(data))
		return r
	}
	r := okResult(start, formatResponse(resp, raw, data, truncated, lim.maxBody), tools.EffectHTTP)
	r.Usage.BytesOut, r.Usage.BytesIn = int64(len(body)), int64(len(data))
	return r
}

func formatResponse(resp *http.Response, asked string, data []byte, truncated bool, max int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", resp.Proto, resp.Status)
	if final := resp.Request.URL.String(); final != asked {
		fmt.Fprintf(&b, "Final-URL: %s\n", resp.Request.URL.Redacted())
	}
	var names []string
	for _, k := range shownResponseHeaders {
		if _, ok := resp.Header[k]; ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.Header.Values(k), ", "))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(&b, "Note: the server answered %d, not a 2xx success status\n", resp.StatusCode)
	}
	b.WriteByte('\n')
	switch {
	case len(data) == 0:
		b.WriteString("[empty body]")
	case isBinary(data[:min(len(data), sniffLen)]):
		fmt.Fprintf(&b, "[binary body of %d bytes not shown]", len(data))
	default:
		if truncated {
			// Drop a rune cut in half by the cap.
			for i := 0; i < utf8.UTFMax && len(data) > 0; i++ {
				if r, _ := utf8.DecodeLastRune(data); r != utf8.RuneError {
					break
				}
				data = data[:len(data)-1]
			}
		}
		b.WriteString(strings.ToValidUTF8(string(data), "\uFFFD"))
	}
	if truncated {
		fmt.Fprintf(&b, "\n[body truncated at %s]", humanSize(max))
	}
	return b.String()
}

func describeHTTPError(err error, timeout time.Duration) string {
	var refused *netclass.Refusal
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &refused):
		return "request refused by the SSRF guard: " + refused.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Sprintf("request timed out after %s", timeout)
	case errors.Is(err, context.Canceled):
		return "request cancelled"
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("could not resolve host %s: %s", dnsErr.Name, dnsErr.Err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("request failed: %v", ue.Err)
	}
	return "request failed: " + err.Error()
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// urlPort is u's port, or the scheme's default.
func urlPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}
