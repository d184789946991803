package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
)

// onlyDial returns a dial wrapper that connects to the given addresses
// only and fails the test for any other: whatever the proxy decides, the
// test sends traffic to nothing but its own loopback servers.
func onlyDial(t *testing.T, allowed ...string) func(func(context.Context, string, string) (net.Conn, error), context.Context, string, string) (net.Conn, error) {
	return func(next func(context.Context, string, string) (net.Conn, error), ctx context.Context, network, addr string) (net.Conn, error) {
		for _, a := range allowed {
			if a == addr {
				return next(ctx, network, addr)
			}
		}
		t.Errorf("the proxy dialled %s", addr)
		return nil, fmt.Errorf("test: refusing to dial %s", addr)
	}
}

// TestUnspecifiedNeverReachable is the attack of issue 9 item 2: "sandboxd's
// API" (a server the test starts on 127.0.0.1) is protected, and the
// tenant's allow_private_cidrs covers every IPv4 address, every IPv6
// address, or both. On Linux a connection to 0.0.0.0 (or ::) reaches the
// local host, so every spelling of the unspecified address, and every IPv6
// form carrying it or IPv4 loopback, must be refused before any
// connection: as a literal, as a DNS answer, through CONNECT and after a
// redirect from an allowed origin.
func TestUnspecifiedNeverReachable(t *testing.T) {
	t.Parallel()
	var apiHits atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiHits.Add(1)
		fmt.Fprint(w, "sandboxd_metrics 1")
	}))
	t.Cleanup(api.Close)
	port := api.Listener.Addr().(*net.TCPAddr).Port
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+r.URL.Query().Get("to")+"/metrics", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	rport := redirector.Listener.Addr().(*net.TCPAddr).Port

	names := map[string]string{
		"zero.test":        "0.0.0.0",
		"zeronet.test":     "0.1.2.3",
		"zero6.test":       "::",
		"mapped0.test":     "::ffff:0.0.0.0",
		"compat-lo.test":   "::127.0.0.1",
		"compat0.test":     "::0.0.0.2",
		"nat64-lo.test":    "64:ff9b::7f00:1",
		"nat64-0.test":     "64:ff9b::",
		"nat64local.test":  "64:ff9b:1::7f00:1",
		"6to4-lo.test":     "2002:7f00:1::1",
		"6to4-0.test":      "2002::1",
		"translated.test":  "::ffff:0:7f00:1",
		"translated0.test": "::ffff:0:0:0",
		"teredo.test":      "2001:0:7f00:1::",
		"isatap.test":      "fd00::5efe:7f00:1",
		"mixed.test":       "0.0.0.0,::",
	}
	var kv []string
	rules := []policy.EgressRule{{Host: "redirect.test", Ports: []int{rport}}}
	for n, a := range names {
		kv = append(kv, n, a)
		rules = append(rules, policy.EgressRule{Host: n, Ports: []int{port}})
	}
	kv = append(kv, "redirect.test", "127.0.0.1")
	literals := []string{"0.0.0.0", "::", "::ffff:0.0.0.0", "::ffff:0:0", "0:0::0", "::127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::"}
	for _, l := range literals {
		rules = append(rules, policy.EgressRule{Host: l, Ports: []int{port}})
	}
	var urls []string
	for n := range names {
		urls = append(urls, fmt.Sprintf("http://%s:%d/metrics", n, port))
	}
	for _, l := range literals {
		host := l
		if strings.Contains(l, ":") {
			host = "[" + l + "]"
		}
		urls = append(urls, fmt.Sprintf("http://%s:%d/metrics", host, port))
	}
	// Non-canonical spellings of 0.0.0.0 and [::].
	for _, h := range []string{"0", "0x0", "00", "0.0", "0.0.0", "000.000.000.000", "0x0.0", "0.0.0.0.", "[0:0::0]", "[0000::]", "[::0.0.0.0]", "[::ffff:0:0]"} {
		urls = append(urls, fmt.Sprintf("http://%s:%d/metrics", h, port))
	}
	prot := netclass.NewProtected()
	prot.AddListener("API", api.Listener.Addr())
	for _, cidrs := range [][]string{{"0.0.0.0/0"}, {"::/0"}, {"0.0.0.0/0", "::/0"}} {
		pol := &policy.EgressPolicy{Allow: rules, AllowPrivateCIDRs: cidrs}
		e := newEnvDial(t, pol, newResolver(kv...), Options{Protected: prot}, onlyDial(t, redirector.Listener.Addr().String()))
		t.Run(strings.Join(cidrs, ","), func(t *testing.T) {
			for _, u := range urls {
				code, body := get(t, e.client(nil), "GET", u, "")
				if code != http.StatusForbidden || !strings.HasPrefix(body, "egress denied:") {
					t.Errorf("%s: status %d body %q, want 403 egress denied", u, code, body)
				}
				// The same as a CONNECT tunnel.
				host := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/metrics")
				c, err := net.Dial("unix", e.sock)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
				buf := make([]byte, 12)
				n, _ := c.Read(buf)
				c.Close()
				if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 403") {
					t.Errorf("CONNECT %s: %q", host, buf[:n])
				}
			}
			// A 302 from an allowed origin to the unspecified address: the
			// client follows it through the proxy, which decides anew.
			for _, to := range []string{fmt.Sprintf("0.0.0.0:%d", port), fmt.Sprintf("[::]:%d", port), fmt.Sprintf("zero.test:%d", port), fmt.Sprintf("0:%d", port)} {
				code, body := get(t, e.client(nil), "GET", fmt.Sprintf("http://redirect.test:%d/?to=%s", rport, to), "")
				if code != http.StatusForbidden || !strings.HasPrefix(body, "egress denied:") {
					t.Errorf("redirect to %s: status %d body %q", to, code, body)
				}
			}
		})
	}
	t.Cleanup(func() {
		if n := apiHits.Load(); n != 0 {
			t.Errorf("the protected server answered %d requests", n)
		}
	})
}

// TestProtectedEveryLocalAddress: when sandboxd listens on every address
// (0.0.0.0 or ::), its port is protected on every address of this host,
// loopback and interfaces alike, whatever allow_private_cidrs allows; the
// refusal comes before any connection. A second listener (metrics) is
// protected the same way.
func TestProtectedEveryLocalAddress(t *testing.T) {
	t.Parallel()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	const apiPort, metricsPort = 18080, 19090 // never dialled: refused before
	prot := netclass.NewProtected()
	prot.Add("API", netip.AddrPortFrom(netip.IPv4Unspecified(), apiPort))
	prot.AddListener("metrics", &net.TCPAddr{IP: net.IPv6unspecified, Port: metricsPort})
	var targets []string
	var rules []policy.EgressRule
	for _, a := range append(addrs, &net.IPNet{IP: net.IPv4(127, 0, 0, 1)}, &net.IPNet{IP: net.IPv4(127, 1, 2, 3)}) {
		ip, _ := netip.AddrFromSlice(a.(*net.IPNet).IP)
		ip = ip.Unmap()
		if ip.Is6() && ip.IsLinkLocalUnicast() {
			continue // needs a zone, refused for that alone
		}
		rules = append(rules, policy.EgressRule{Host: ip.String(), Ports: []int{apiPort, metricsPort}})
		for _, p := range []int{apiPort, metricsPort} {
			targets = append(targets, netip.AddrPortFrom(ip, uint16(p)).String())
		}
	}
	pol := &policy.EgressPolicy{Allow: rules, AllowPrivateCIDRs: []string{"0.0.0.0/0", "::/0"}}
	e := newEnvDial(t, pol, newResolver(), Options{Protected: prot}, onlyDial(t))
	for _, target := range targets {
		code, body := get(t, e.client(nil), "GET", "http://"+target+"/metrics", "")
		if code != http.StatusForbidden || !strings.Contains(body, "sandboxd's own") {
			t.Errorf("%s: status %d body %q", target, code, body)
		}
	}
	if len(targets) < 4 {
		t.Fatalf("only %v", targets)
	}
}
