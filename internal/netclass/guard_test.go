package netclass

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

var allowAll = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// thisHostSpellings are addresses that reach (or, through a translator or
// tunnel, would reach) the host they are sent from: never allowed.
var thisHostSpellings = []string{
	"0.0.0.0", "0.0.0.1", "0.1.2.3", "0.255.255.255",
	"::", "0:0::0", "0000:0000:0000:0000:0000:0000:0000:0000",
	"::ffff:0.0.0.0", "::ffff:0:0", "::ffff:0.1.2.3", "0:0:0:0:0:ffff:0:0",
	"::0.0.0.0", "::0.0.0.2", "::127.0.0.1", "::7f00:1", "::7f12:3456",
	"::ffff:0:0:0", "::ffff:0:7f00:1", "::ffff:0:127.1.2.3",
	"64:ff9b::", "64:ff9b::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::0.0.0.0",
	"64:ff9b:1::127.0.0.1",    // local-use NAT64, /96
	"64:ff9b:1:7f00:0:100::",  // local-use NAT64, /48 (127.0.0.1 around the u octet)
	"64:ff9b:1:ff7f:0:1::",    // /56
	"64:ff9b:1:ffff:7f:0:1::", // /64
	"2002::", "2002:7f00:1::", "2002:7f00:1::1", "2002:0:1::",
	"2001:0:7f00:1::",           // Teredo server 127.0.0.1
	"2001:0:808:808::80ff:fffe", // Teredo client 127.0.0.1 (inverted)
	"2001:0:808:808::ffff:ffff", // Teredo client 0.0.0.0 (inverted)
	"2001:db8::5efe:7f00:1",     // ISATAP 127.0.0.1
	"2606:4700::200:5efe:0.0.0.0",
	"fe80::1%eth0",
}

func TestJudgeThisHost(t *testing.T) {
	t.Parallel()
	for _, s := range thisHostSpellings {
		ip := netip.MustParseAddr(s)
		if c, why := Judge(ip); c != ThisHost || why == "" {
			t.Errorf("Judge(%s) = %v %q, want this-host", s, c, why)
		}
	}
	// Neighbours that are not this host keep their class.
	for s, want := range map[string]Class{
		"127.0.0.1":                    Special,
		"::1":                          Special,
		"::ffff:127.0.0.1":             Special,
		"::8.8.8.8":                    Special,
		"64:ff9b::808:808":             Public,
		"64:ff9b::a9fe:a9fe":           Metadata,
		"64:ff9b:1::808:808":           Special,
		"64:ff9b:1:808:8:800::":        Special, // 8.8.8.8 as /48
		"64:ff9b:1:7f00:100:1:808:808": Special, // u octet set: /96 only
		"2002:808:808::1":              Public,
		"2001:0:808:808::f7f7:f7f7":    Special,
		"2606:4700::5efe:808:808":      Public,
		"1.0.0.0":                      Public,
		"169.254.169.254":              Metadata,
		"::ffff:169.254.169.254":       Metadata,
	} {
		if c, why := Judge(netip.MustParseAddr(s)); c != want {
			t.Errorf("Judge(%s) = %v %q, want %v", s, c, why, want)
		}
	}
}

// TestGuardNeverAllowsThisHost: with allow_private_cidrs [0.0.0.0/0, ::/0]
// every spelling of the unspecified address (and every form carrying it or
// loopback) is refused, as an address, as a URL host and before connect.
func TestGuardNeverAllowsThisHost(t *testing.T) {
	t.Parallel()
	g := NewGuard(allowAll, NewProtected())
	for _, s := range thisHostSpellings {
		ip := netip.MustParseAddr(s)
		ap := netip.AddrPortFrom(ip, 8080)
		var r *Refusal
		if err := g.Check(ap); !errors.As(err, &r) || r.Class != ThisHost {
			t.Errorf("Check(%s) = %v", ap, err)
		}
		if err := g.Control("tcp", ap.String(), nil); err == nil {
			t.Errorf("Control(%s) allowed", ap)
		}
		host := s
		if ip.Is6() {
			host = "[" + s + "]"
		}
		if err := g.CheckHost(host, 8080); err == nil {
			t.Errorf("CheckHost(%s) allowed", host)
		}
	}
	// Every non-canonical spelling a resolver or browser reads as 0.0.0.0.
	for _, h := range []string{"0", "00", "0x0", "0X0", "0x", "0.0", "0.0.0", "0.0.0.0.", "000.000.000.000", "0x0.0x0.0x0.0x0",
		"00000000000", "0.0x0", "[::]", "[0:0::0]", "[::ffff:0:0]", "[::ffff:0.0.0.0]", "[0::0.0.0.0]", "0.1", "0.65535"} {
		if err := g.CheckHost(h, 80); err == nil {
			t.Errorf("CheckHost(%q) allowed", h)
		}
		if err := CheckHost(h); err == nil {
			t.Errorf("package CheckHost(%q) allowed", h)
		}
	}
	// allow_private_cidrs still opens what it names.
	for _, s := range []string{"127.0.0.1:80", "[::1]:80", "10.1.2.3:80", "[::ffff:10.1.2.3]:80", "[fd00::1]:80"} {
		if err := g.Check(netip.MustParseAddrPort(s)); err != nil {
			t.Errorf("Check(%s) with allow-all: %v", s, err)
		}
	}
}

func TestGuardAllowPrivate(t *testing.T) {
	t.Parallel()
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00:ec2::254/128")}, nil)
	for s, ok := range map[string]bool{
		"10.1.2.3:80":           true,
		"[::ffff:10.1.2.3]:80":  true,
		"11.1.2.3:80":           true,
		"192.168.1.1:80":        false,
		"127.0.0.1:80":          false,
		"169.254.1.1:80":        true,
		"169.254.169.254:80":    false, // metadata only as a single address
		"[fd00:ec2::254]:80":    true,
		"0.0.0.0:80":            false,
		"[2606:4700::1111]:443": true,
	} {
		if err := g.Check(netip.MustParseAddrPort(s)); (err == nil) != ok {
			t.Errorf("Check(%s) = %v, want allowed=%v", s, err, ok)
		}
	}
}

// fakeLocal makes p see this host with the given interface addresses.
func fakeLocal(p *Protected, addrs ...string) {
	var ips []netip.Addr
	for _, a := range addrs {
		ips = append(ips, netip.MustParseAddr(a))
	}
	p.localAddrs = func() ([]netip.Addr, error) { return ips, nil }
}

func TestProtected(t *testing.T) {
	t.Parallel()
	p := NewProtected()
	fakeLocal(p, "127.0.0.1", "::1", "192.0.2.2", "fd00::2")
	p.Add("API", netip.MustParseAddrPort("127.0.0.1:8080"))
	p.AddListener("metrics", &net.TCPAddr{IP: net.IPv6zero, Port: 9090})
	p.Add("store", netip.MustParseAddrPort("198.51.100.7:5432"))
	p.Add("nothing yet", netip.MustParseAddrPort("127.0.0.1:0"))
	if err := p.AddURL(t.Context(), "docker daemon", "tcp://192.0.2.2:2376"); err != nil {
		t.Fatal(err)
	}
	if err := p.AddURL(t.Context(), "docker socket", "unix:///var/run/docker.sock"); err != nil {
		t.Fatal(err)
	}
	if err := p.AddHostPort(t.Context(), "replica", "[2001:db8::9]:7000"); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]string{
		"127.0.0.1:8080":          "API",
		"127.0.0.2:8080":          "API", // a loopback address: every local address of the port
		"[::1]:8080":              "API",
		"192.0.2.2:8080":          "API",
		"[::ffff:192.0.2.2]:8080": "API",
		"[fd00::2]:8080":          "API",
		"0.0.0.0:8080":            "API",
		"[::]:8080":               "API",
		"192.0.2.3:8080":          "", // another host
		"127.0.0.1:8081":          "",
		"127.0.0.1:9090":          "metrics",
		"192.0.2.2:9090":          "metrics",
		"[fd00::2]:9090":          "metrics",
		"198.51.100.7:5432":       "store",
		"198.51.100.8:5432":       "",
		"127.0.0.1:5432":          "",
		"192.0.2.2:2376":          "docker daemon",
		"127.0.0.1:2376":          "docker daemon",
		"[2001:db8::9]:7000":      "replica",
		"127.0.0.1:0":             "",
	} {
		if got := p.Which(netip.MustParseAddrPort(s)); got != want {
			t.Errorf("Which(%s) = %q, want %q", s, got, want)
		}
	}
	// An address added to an interface later is protected at once.
	fakeLocal(p, "127.0.0.1", "::1", "192.0.2.2", "fd00::2", "172.17.0.1")
	if got := p.Which(netip.MustParseAddrPort("172.17.0.1:8080")); got != "API" {
		t.Errorf("new interface address: %q", got)
	}
	// A Guard refuses protected addresses whatever allow_private_cidrs
	// says, and public ones too.
	g := NewGuard(allowAll, p)
	for _, s := range []string{"127.0.0.1:8080", "192.0.2.2:9090", "198.51.100.7:5432", "[::ffff:127.0.0.1]:8080"} {
		var r *Refusal
		if err := g.Check(netip.MustParseAddrPort(s)); !errors.As(err, &r) || r.Protected == "" || !strings.Contains(r.Reason, "sandboxd's own") {
			t.Errorf("Check(%s) = %v", s, err)
		}
	}
	if err := g.Check(netip.MustParseAddrPort("127.0.0.1:8081")); err != nil {
		t.Errorf("unprotected port: %v", err)
	}
	if err := g.CheckHost("localhost", 8080); err == nil || !strings.Contains(err.Error(), "sandboxd's own API") {
		t.Errorf("CheckHost(localhost:8080) = %v", err)
	}
	for _, bad := range []string{"8080", "host:port:x", "h:99999"} {
		if err := p.AddHostPort(t.Context(), "x", bad); err == nil {
			t.Errorf("AddHostPort(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"tcp://", "foo://h", "%zz"} {
		if err := p.AddURL(t.Context(), "x", bad); err == nil {
			t.Errorf("AddURL(%q) accepted", bad)
		}
	}
	// An unreadable interface list protects the port everywhere local
	// could mean.
	p.localAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink failed") }
	if got := p.Which(netip.MustParseAddrPort("192.0.2.200:8080")); got != "API" {
		t.Errorf("unreadable interfaces: %q", got)
	}
}

// TestProtectedRealInterfaces: a wildcard listener protects its port on
// this host's real interface addresses (read from the kernel).
func TestProtectedRealInterfaces(t *testing.T) {
	t.Parallel()
	p := NewProtected()
	p.Add("API", netip.MustParseAddrPort("0.0.0.0:8080"))
	addrs, err := interfaceAddrs()
	if err != nil || len(addrs) == 0 {
		t.Fatalf("interfaces: %v %v", addrs, err)
	}
	for _, a := range addrs {
		if got := p.Which(netip.AddrPortFrom(a, 8080)); got != "API" {
			t.Errorf("%s:8080 not protected (%q)", a, got)
		}
	}
}

// TestDialer: names resolving to this host's unspecified address, or to a
// protected address, are refused before any connection; an allowed one
// connects to exactly the checked address. Only servers the test starts on
// loopback are contacted; Control refuses (and the test fails on) any
// other.
func TestDialer(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the protected server got %s", r.URL)
	}))
	t.Cleanup(api.Close)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	}))
	t.Cleanup(redir.Close)
	srvAddr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	apiAddr := netip.MustParseAddrPort(api.Listener.Addr().String())
	p := NewProtected()
	p.AddListener("API", api.Listener.Addr())
	answers := map[string][]string{
		"ok.test":     {"127.0.0.1"},
		"zero.test":   {"0.0.0.0"},
		"zero6.test":  {"::"},
		"mapped.test": {"::ffff:0.0.0.0"},
		"compat.test": {"::127.0.0.1"},
		"both.test":   {"0.0.0.0", "::"},
		"skip.test":   {"0.0.0.0", "127.0.0.1"}, // the refused one is skipped
	}
	var dialled []string
	g := NewGuard(allowAll, p)
	d := &Dialer{Guard: g, Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range answers[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		if out == nil {
			return nil, errors.New("no such host")
		}
		return out, nil
	}, Connected: func(ap netip.AddrPort) { dialled = append(dialled, ap.String()) },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != srvAddr.String() && addr != redir.Listener.Addr().String() {
				t.Errorf("dialled %s", addr)
				return nil, fmt.Errorf("test: refusing to dial %s", addr)
			}
			return (&net.Dialer{Control: g.Control}).DialContext(ctx, network, addr)
		}}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(r *http.Request, _ []*http.Request) error { return d.Guard.CheckURL(r.URL) }}
	port := fmt.Sprint(srvAddr.Port())
	for _, host := range []string{"zero.test", "zero6.test", "mapped.test", "compat.test", "both.test", "0.0.0.0", "[::]", "[::ffff:0:0]", "0"} {
		_, err := client.Get("http://" + host + ":" + port + "/")
		var r *Refusal
		if !errors.As(err, &r) {
			t.Errorf("%s: %v, want a refusal", host, err)
		}
	}
	if _, err := client.Get(fmt.Sprintf("http://localhost:%d/", apiAddr.Port())); err == nil || !strings.Contains(err.Error(), "sandboxd's own API") {
		t.Errorf("protected via localhost: %v", err)
	}
	if _, err := client.Get(fmt.Sprintf("http://ok.test:%d/", apiAddr.Port())); err == nil || !strings.Contains(err.Error(), "sandboxd's own API") {
		t.Errorf("protected via a name: %v", err)
	}
	for _, host := range []string{"ok.test", "skip.test", "127.0.0.1"} {
		resp, err := client.Get("http://" + host + ":" + port + "/")
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		resp.Body.Close()
	}
	if hits.Load() != 3 || len(dialled) != 3 || dialled[0] != srvAddr.String() || dialled[1] != srvAddr.String() {
		t.Errorf("hits %d, dialled %v", hits.Load(), dialled)
	}
	// A 302 to the unspecified address is refused at CheckRedirect.
	if _, err := client.Get(redir.URL + "/?to=" + url.QueryEscape(fmt.Sprintf("http://0.0.0.0:%d/metrics", apiAddr.Port()))); err == nil || !strings.Contains(err.Error(), "unspecified") {
		t.Errorf("redirect to 0.0.0.0: %v", err)
	}
	// Control is the last word whatever the dialer was handed.
	var ctl syscall.RawConn
	if err := d.Guard.Control("tcp", "[::]:"+port, ctl); err == nil {
		t.Error("Control allowed [::]")
	}
	if _, err := (&Dialer{Guard: NewGuard(nil, nil)}).DialContext(t.Context(), "tcp", "x:0"); err == nil {
		t.Error("port 0 dialled")
	}
	if err := d.Guard.CheckURL(&url.URL{Scheme: "file", Path: "/etc/passwd"}); err == nil {
		t.Error("file URL allowed")
	}
}

// FuzzGuardHost: whatever the host, a Guard that allows every private
// network never accepts one meaning this host, nor a protected address.
func FuzzGuardHost(f *testing.F) {
	for _, s := range []string{"0", "0x0", "0.0", "[::]", "[0:0::0]", "[::ffff:0:0]", "127.0.0.1", "[::127.0.0.1]",
		"[64:ff9b::7f00:1]", "[2002:7f00:1::]", "localhost", "example.com", "8.8.8.8", "[2001:0:7f00:1::]"} {
		f.Add(s, uint16(8080))
	}
	p := NewProtected()
	fakeLocal(p, "127.0.0.1", "::1", "192.0.2.2")
	p.Add("API", netip.MustParseAddrPort("127.0.0.1:8080"))
	g := NewGuard(allowAll, p)
	f.Fuzz(func(t *testing.T, host string, port uint16) {
		if port == 0 {
			port = 8080
		}
		err := g.CheckHost(host, int(port))
		ip, perr := parseNumericHost(host)
		if perr != nil {
			return
		}
		ap := netip.AddrPortFrom(ip.Unmap(), port)
		if c, _ := Judge(ip.Unmap()); c == ThisHost && err == nil {
			t.Fatalf("CheckHost(%q) allowed this host (%s)", host, ip)
		}
		if p.Which(ap) != "" && err == nil {
			t.Fatalf("CheckHost(%q, %d) allowed a protected address", host, port)
		}
		if g.Check(ap) == nil && ip.Unmap().IsUnspecified() {
			t.Fatalf("Check(%s) allowed", ap)
		}
	})
}
