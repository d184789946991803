package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
)

// fakeResolver answers from a table; every other name does not exist. It
// never asks real DNS.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	lookups map[string]int
}

func newResolver(kv ...string) *fakeResolver {
	r := &fakeResolver{answers: map[string][]netip.Addr{}, lookups: map[string]int{}}
	for i := 0; i+1 < len(kv); i += 2 {
		for _, a := range strings.Split(kv[i+1], ",") {
			r.answers[kv[i]] = append(r.answers[kv[i]], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups[host]++
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

// origin is a test server echoing what it received.
func origin(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(echo))
	t.Cleanup(ts.Close)
	return ts, ts.Listener.Addr().(*net.TCPAddr).Port
}

func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Proxy-Secret", "leak")
	w.Header().Set("X-Seen-Host", r.Host)
	fmt.Fprintf(w, "%s %s\n", r.Method, r.RequestURI)
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "X-Keep", "Keep-Alive"} {
		if v := r.Header.Get(k); v != "" {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintf(w, "body=%s", body)
}

type env struct {
	proxy  *Proxy
	reg    *prometheus.Registry
	res    *fakeResolver
	sock   string
	mu     sync.Mutex
	events []Event
	served chan error
	ln     net.Listener
}

func newEnv(t *testing.T, pol *policy.EgressPolicy, res *fakeResolver, opts Options) *env {
	t.Helper()
	return newEnvDial(t, pol, res, opts, nil)
}

// newEnvDial is newEnv with the proxy's dial step (connecting to a checked
// address) wrapped by dial, when not nil.
func newEnvDial(t *testing.T, pol *policy.EgressPolicy, res *fakeResolver, opts Options,
	dial func(next func(ctx context.Context, network, addr string) (net.Conn, error), ctx context.Context, network, addr string) (net.Conn, error)) *env {
	t.Helper()
	e := &env{reg: prometheus.NewRegistry(), res: res, served: make(chan error, 1)}
	opts.Registerer, opts.Resolver = e.reg, res
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = p
	eg := p.For(Scope{Tenant: "acme", Session: "s1", Policy: pol, Record: func(ev Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	}})
	if dial != nil {
		se := eg.(*sandboxEgress)
		next := se.dial
		se.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(next, ctx, network, addr)
		}
	}
	e.sock = filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	e.ln = ln
	go func() { e.served <- eg.Serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		select {
		case err := <-e.served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its listener closed")
		}
	})
	return e
}

func (e *env) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", e.sock)
}

// client proxies every request through the egress socket, as a program in
// the sandbox with HTTP_PROXY set would.
func (e *env) client(tlsCfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:3128"}),
		DialContext:     e.dial,
		TLSClientConfig: tlsCfg,
	}, Timeout: 10 * time.Second}
}

func (e *env) lastEvent(t *testing.T) Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		n := len(e.events)
		var ev Event
		if n > 0 {
			ev = e.events[n-1]
		}
		e.mu.Unlock()
		if n > 0 {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatal("no event recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, c *http.Client, method, u string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must go")
	req.Header.Set("X-Keep", "stays")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Proxy-Secret") != "" && !strings.HasPrefix(u, "https:") { // a tunnel is opaque
		t.Errorf("Proxy-* response header passed through")
	}
	return resp.StatusCode, string(b)
}

func loopbackPolicy(port int, rules ...policy.EgressRule) *policy.EgressPolicy {
	if len(rules) == 0 {
		rules = []policy.EgressRule{{Host: "allowed.test", Ports: []int{port}}}
	}
	return &policy.EgressPolicy{Allow: rules, AllowPrivateCIDRs: []string{"127.0.0.0/8"}}
}

func TestForwardAllowed(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{})
	code, body := get(t, e.client(nil), "POST", fmt.Sprintf("http://Allowed.Test.:%d/p?q=1", port), "hello")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if !strings.HasPrefix(body, "POST /p?q=1\n") || !strings.Contains(body, "X-Keep: stays") || !strings.HasSuffix(body, "body=hello") {
		t.Fatalf("origin saw:\n%s", body)
	}
	for _, leaked := range []string{"Proxy-Authorization", "X-Hop", "Proxy-Connection"} {
		if strings.Contains(body, leaked) {
			t.Errorf("%s reached the origin:\n%s", leaked, body)
		}
	}
	ev := e.lastEvent(t)
	if !ev.Allowed || ev.Rule != 0 || ev.Host != "allowed.test" || ev.Port != port || ev.IP != netip.MustParseAddr("127.0.0.1") ||
		ev.Method != "POST" || ev.Status != 200 || ev.BytesOut == 0 || ev.BytesIn == 0 || ev.Tenant != "acme" || ev.Session != "s1" {
		t.Fatalf("event %+v", ev)
	}
	if got := testutil.ToFloat64(e.proxy.m.requests.WithLabelValues("acme", "allowed")); got != 1 {
		t.Errorf("allowed requests = %v", got)
	}
	if got := testutil.ToFloat64(e.proxy.m.bytes.WithLabelValues("acme", "in")); got != float64(ev.BytesIn) {
		t.Errorf("bytes in = %v, event %d", got, ev.BytesIn)
	}
	if got := testutil.ToFloat64(e.proxy.m.bytes.WithLabelValues("acme", "out")); got != float64(ev.BytesOut) {
		t.Errorf("bytes out = %v, event %d", got, ev.BytesOut)
	}
}

func TestDenied(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	p := strconv.Itoa(port)
	res := newResolver("allowed.test", "127.0.0.1", "other.test", "127.0.0.1",
		"rebind.test", "127.0.0.1", "meta.test", "169.254.169.254", "meta6.test", "fd00:ec2::254",
		"mapped.test", "::ffff:169.254.169.254", "cgnat.test", "100.64.1.1", "zero.test", "0.0.0.0",
		"multi.test", "224.0.0.1", "sub.wild.test", "127.0.0.1", "wild.test", "127.0.0.1")
	loop := loopbackPolicy(port,
		policy.EgressRule{Host: "allowed.test", Ports: []int{port}, Methods: []string{"GET"}},
		policy.EgressRule{Host: "meta.test", Ports: []int{port}},
		policy.EgressRule{Host: "meta6.test", Ports: []int{port}},
		policy.EgressRule{Host: "mapped.test", Ports: []int{port}},
		policy.EgressRule{Host: "cgnat.test", Ports: []int{port}},
		policy.EgressRule{Host: "zero.test", Ports: []int{port}},
		policy.EgressRule{Host: "multi.test", Ports: []int{port}},
		policy.EgressRule{Host: "*.wild.test", Ports: []int{port}},
		policy.EgressRule{Host: "noports.test"},
	)
	loop.AllowPrivateCIDRs = []string{"127.0.0.0/8", "169.254.0.0/16"} // metadata needs a /32
	strict := &policy.EgressPolicy{Allow: []policy.EgressRule{
		{Host: "127.0.0.1", Ports: []int{port}},
		{Host: "rebind.test", Ports: []int{port}},
		{Host: "::1", Ports: []int{port}},
	}}
	withLoop := newEnv(t, loop, res, Options{})
	noPrivate := newEnv(t, strict, res, Options{})
	for _, tc := range []struct {
		name   string
		e      *env
		method string
		url    string
		want   string
	}{
		{"not allowlisted", withLoop, "GET", "http://other.test:" + p + "/", "no rule"},
		{"wrong port", withLoop, "GET", "http://allowed.test:" + strconv.Itoa(port+1) + "/", "no rule"},
		{"default ports only", withLoop, "GET", "http://noports.test:" + p + "/", "no rule"},
		{"method not listed", withLoop, "POST", "http://allowed.test:" + p + "/", "no rule"},
		{"wildcard is not the apex", withLoop, "GET", "http://wild.test:" + p + "/", "no rule"},
		{"metadata inside a wide allowed CIDR", withLoop, "GET", "http://meta.test:" + p + "/", "metadata"},
		{"metadata v6", withLoop, "GET", "http://meta6.test:" + p + "/", "metadata"},
		{"mapped metadata", withLoop, "GET", "http://mapped.test:" + p + "/", "metadata"},
		{"cgnat", withLoop, "GET", "http://cgnat.test:" + p + "/", "carrier-grade NAT"},
		{"unspecified", withLoop, "GET", "http://zero.test:" + p + "/", "unspecified"},
		{"multicast", withLoop, "GET", "http://multi.test:" + p + "/", "multicast"},
		{"loopback literal without allow_private_cidrs", noPrivate, "GET", "http://127.0.0.1:" + p + "/", "loopback"},
		{"v6 loopback literal", noPrivate, "GET", "http://[::1]:" + p + "/", "loopback"},
		{"rebinding to loopback", noPrivate, "GET", "http://rebind.test:" + p + "/", "loopback"},
		{"short numeric spelling", noPrivate, "GET", "http://127.1:" + p + "/", "dotted-decimal"},
		{"hex spelling", noPrivate, "GET", "http://0x7f000001:" + p + "/", "dotted-decimal"},
		{"decimal spelling", noPrivate, "GET", "http://2130706433:" + p + "/", "dotted-decimal"},
		{"bad punycode", withLoop, "GET", "http://xn--zz.test:" + p + "/", "punycode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, tc.e.client(nil), tc.method, tc.url, "")
			if code != http.StatusForbidden || !strings.Contains(body, tc.want) || !strings.HasPrefix(body, "egress denied:") {
				t.Fatalf("status %d body %q, want 403 mentioning %q", code, body, tc.want)
			}
			ev := tc.e.lastEvent(t)
			if ev.Allowed || ev.Status != 403 || ev.Reason == "" || ev.IP.IsValid() {
				t.Fatalf("event %+v", ev)
			}
		})
	}
	if n := res.count("other.test"); n != 0 {
		t.Errorf("a host matching no rule was looked up %d times", n)
	}
	if got := testutil.ToFloat64(withLoop.proxy.m.requests.WithLabelValues("acme", "denied")); got < 5 {
		t.Errorf("denied requests = %v", got)
	}
}

func TestConnectTunnel(t *testing.T) {
	t.Parallel()
	ts := httptest.NewTLSServer(http.HandlerFunc(echo))
	t.Cleanup(ts.Close)
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	tlsCfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsCfg.ServerName = "example.com" // httptest's certificate names example.com
	res := newResolver("allowed.test", "127.0.0.1", "getonly.test", "127.0.0.1", "withconnect.test", "127.0.0.1")
	pol := loopbackPolicy(port,
		policy.EgressRule{Host: "allowed.test", Ports: []int{port}},
		policy.EgressRule{Host: "getonly.test", Ports: []int{port}, Methods: []string{"GET"}},
		policy.EgressRule{Host: "withconnect.test", Ports: []int{port}, Methods: []string{"get", "CONNECT"}},
	)
	e := newEnv(t, pol, res, Options{})
	c := e.client(tlsCfg)
	for _, host := range []string{"allowed.test", "withconnect.test"} {
		code, body := get(t, c, "GET", fmt.Sprintf("https://%s:%d/secure", host, port), "")
		if code != 200 || !strings.HasPrefix(body, "GET /secure\n") {
			t.Fatalf("%s: status %d body %q", host, code, body)
		}
		// The event is recorded when the tunnel closes.
		c.CloseIdleConnections()
		var ev Event
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if ev = e.lastEvent(t); ev.Host == host {
				break
			}
		}
		if !ev.Allowed || ev.Method != "CONNECT" || ev.Host != host || ev.Status != 200 || ev.BytesIn == 0 || ev.BytesOut == 0 {
			t.Fatalf("event %+v", ev)
		}
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("https://getonly.test:%d/", port), nil)
	_, err := c.Do(req)
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT under a GET-only rule: %v", err)
	}
	// Raw CONNECT: the denial body is readable.
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT getonly.test:%d HTTP/1.1\r\nHost: getonly.test:%d\r\n\r\n", port, port)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(b), "allows CONNECT") {
		t.Fatalf("status %d body %q", resp.StatusCode, b)
	}
}

// TestTunnelBytesAndHalfClose: a raw TCP echo origin behind CONNECT; the
// client half-closes and still reads the answer; bytes are counted.
func TestTunnelBytesAndHalfClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the half-close arrives
				fmt.Fprintf(c, "got %d bytes: %s", len(b), b)
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{})
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The first payload is pipelined right behind the CONNECT head.
	fmt.Fprintf(conn, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\nping", port)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(conn, "-pong")
	conn.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(br)
	if err != nil || string(b) != "got 9 bytes: ping-pong" {
		t.Fatalf("read %q, %v", b, err)
	}
	conn.Close()
	ev := e.lastEvent(t)
	if !ev.Allowed || ev.BytesOut != 9 || ev.BytesIn != int64(len(b)) || ev.Method != "CONNECT" || ev.Host != "allowed.test" {
		t.Fatalf("event %+v", ev)
	}
}

// TestKeepAliveDecidesEachRequest sends two requests on one connection:
// the first allowed, the second refused.
func TestKeepAliveDecidesEachRequest(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	res := newResolver("allowed.test", "127.0.0.1", "other.test", "127.0.0.1")
	e := newEnv(t, loopbackPolicy(port), res, Options{})
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i, tc := range []struct {
		host string
		want int
	}{{"allowed.test", 200}, {"allowed.test", 200}, {"other.test", 403}} {
		fmt.Fprintf(conn, "GET http://%s:%d/%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", tc.host, port, i, tc.host, port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("request %d to %s: %d, want %d", i, tc.host, resp.StatusCode, tc.want)
		}
	}
	if n := res.count("allowed.test"); n != 2 {
		t.Errorf("allowed.test looked up %d times, want once per request", n)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{MaxHeaderBytes: 1024})
	for _, tc := range []struct {
		name, raw string
		want      int
	}{
		{"origin form", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"https absolute form", fmt.Sprintf("GET https://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port), 400},
		{"ftp", "GET ftp://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"connect without port", "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 403},
		{"connect unbracketed v6", "CONNECT ::1:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400}, // net/http refuses it
		{"connect leading zero port", fmt.Sprintf("CONNECT allowed.test:0%d HTTP/1.1\r\nHost: x\r\n\r\n", port), 403},
		{"connect port 0", "CONNECT allowed.test:0 HTTP/1.1\r\nHost: x\r\n\r\n", 403},
		{"connect port too big", "CONNECT allowed.test:65536 HTTP/1.1\r\nHost: x\r\n\r\n", 403},
		{"non-ascii host", "CONNECT b\xc3\xbccher.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", 403},
		{"header too large", "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-Big: " + strings.Repeat("a", 8192) + "\r\n\r\n", 431},
		{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.waitEvents(t, 0))
			conn, err := net.Dial("unix", e.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, tc.raw)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			conn.Close()
			// Audited once, also what net/http refused before the handler.
			ev := e.waitEvents(t, before+1)[before]
			if ev.Allowed || ev.Status != tc.want || ev.Reason == "" || ev.Tenant != "acme" {
				t.Fatalf("audit event %+v, want a denial with status %d", ev, tc.want)
			}
		})
	}
	// A request cut off mid-header is audited when its connection closes,
	// with what it asked for.
	before := len(e.waitEvents(t, 0))
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET http://allowed.test/secret HTTP/1.1\r\nHost: allo")
	time.Sleep(50 * time.Millisecond)
	conn.Close()
	ev := e.waitEvents(t, before+1)[before]
	// (net/http answers a truncated header with 400.)
	if ev.Allowed || ev.Status != http.StatusBadRequest || ev.Reason == "" ||
		ev.Method != "GET" || ev.Host != "http://allowed.test/secret" {
		t.Fatalf("audit event %+v, want a refused GET", ev)
	}
	// A connection that closes between requests is no request.
	conn, err = net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	time.Sleep(100 * time.Millisecond)
	if n := len(e.waitEvents(t, 0)); n != before+1 {
		t.Fatalf("%d events after an empty connection, want %d", n, before+1)
	}
}

// stopExpectClosed closes the sandbox's listener and expects Serve to
// return and conn, read through br, to be closed.
func (e *env) stopExpectClosed(t *testing.T, conn net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	e.ln.Close()
	select {
	case err := <-e.served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		e.served <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("%s still open after Serve ended: %v", what, err)
	}
}

// waitEvents waits until at least n events were recorded and returns them.
func (e *env) waitEvents(t *testing.T, n int) []Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		evs := append([]Event(nil), e.events...)
		e.mu.Unlock()
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events recorded, want %d", len(evs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeStopsTunnels: closing the listener ends Serve and every tunnel.
func TestServeStopsTunnels(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{})
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", port)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	e.stopExpectClosed(t, conn, br, "tunnel")
}

func TestDialOnlyCheckedAddress(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	// The first answer is refused; the proxy must dial the second, the
	// one it checked, and never look the name up again.
	res := newResolver("allowed.test", "169.254.169.254,127.0.0.1")
	e := newEnv(t, loopbackPolicy(port), res, Options{})
	code, body := get(t, e.client(nil), "GET", fmt.Sprintf("http://allowed.test:%d/", port), "")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if ev := e.lastEvent(t); ev.IP != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("event %+v", ev)
	}
	if n := res.count("allowed.test"); n != 1 {
		t.Fatalf("looked up %d times", n)
	}
}

func TestNilPolicyAllowsNothing(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	e := newEnv(t, nil, newResolver("allowed.test", "127.0.0.1"), Options{})
	code, body := get(t, e.client(nil), "GET", fmt.Sprintf("http://allowed.test:%d/", port), "")
	if code != 403 {
		t.Fatalf("status %d: %s", code, body)
	}
	bad := &policy.EgressPolicy{Allow: []policy.EgressRule{{Host: "allowed.test", Ports: []int{port}}}, AllowPrivateCIDRs: []string{"nonsense"}}
	e = newEnv(t, bad, newResolver("allowed.test", "127.0.0.1"), Options{})
	code, body = get(t, e.client(nil), "GET", fmt.Sprintf("http://allowed.test:%d/", port), "")
	if code != 403 || !strings.Contains(body, "invalid") {
		t.Fatalf("invalid policy: status %d: %s", code, body)
	}
}

func TestMaxConnsPerSandbox(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{MaxConnsPerSandbox: 1})
	first, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(first, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", port)
	if resp, err := http.ReadResponse(bufio.NewReader(first), &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	second, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	fmt.Fprintf(second, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port)
	second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := second.Read(make([]byte, 1)); n > 0 || err == nil {
		t.Fatal("a second connection was served while the first held the only slot")
	}
	first.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("second connection after the first closed: %v %v", resp, err)
	}
}

func TestMetricsRegistered(t *testing.T) {
	t.Parallel()
	_, port := origin(t)
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{})
	get(t, e.client(nil), "GET", fmt.Sprintf("http://allowed.test:%d/", port), "")
	get(t, e.client(nil), "GET", fmt.Sprintf("http://denied.test:%d/", port), "")
	// A forwarded request is recorded when its exchange ends, which may be
	// just after the client has read the response.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n, _ := testutil.GatherAndCount(e.reg, "sandboxd_egress_requests_total"); n == 2 {
			break
		}
	}
	want := `
# HELP sandboxd_egress_requests_total Requests and CONNECT tunnels sandboxes asked the egress proxy for, by tenant and decision (allowed, denied).
# TYPE sandboxd_egress_requests_total counter
sandboxd_egress_requests_total{decision="allowed",tenant="acme"} 1
sandboxd_egress_requests_total{decision="denied",tenant="acme"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "sandboxd_egress_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(e.reg, "sandboxd_egress_bytes_total"); err != nil || n != 2 {
		t.Fatalf("bytes series: %d, %v", n, err)
	}
	if _, err := New(Options{Registerer: e.reg}); err == nil {
		t.Fatal("registering the metrics twice succeeded")
	}
}

// sandboxd's own API is never reachable, even for a tenant whose policy
// allows its address and port (Options.Protected).
func TestProtectedAddress(t *testing.T) {
	t.Parallel()
	for _, protected := range []string{"127.0.0.1", "0.0.0.0"} {
		var hits atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		t.Cleanup(ts.Close)
		port := ts.Listener.Addr().(*net.TCPAddr).Port
		prot := netclass.NewProtected()
		prot.Add("API", netip.AddrPortFrom(netip.MustParseAddr(protected), uint16(port)))
		e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{Protected: prot})
		code, body := get(t, e.client(nil), "GET", fmt.Sprintf("http://allowed.test:%d/", port), "")
		if code != http.StatusForbidden || !strings.Contains(body, "sandboxd's own API") {
			t.Fatalf("protected %s: status %d: %s", protected, code, body)
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("protected %s: the origin saw %d requests", protected, n)
		}
	}
}

// An upgraded exchange (WebSocket) forwarded as plain http ends when the
// sandbox's listener closes, like a CONNECT tunnel.
func TestServeStopsUpgraded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		io.Copy(c, brw) // echo until the proxy closes
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	e := newEnv(t, loopbackPolicy(port), newResolver("allowed.test", "127.0.0.1"), Options{})
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://allowed.test:%d/ws HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", port, port)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprint(conn, "ping\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the upgraded connection: %q %v", line, err)
	}
	e.stopExpectClosed(t, conn, br, "upgraded connection")
}
