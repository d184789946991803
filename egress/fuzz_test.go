package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/policy"
)

func TestSplitTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		def      int
		host     string
		port     int
		mustFail bool
	}{
		{in: "example.com:443", host: "example.com", port: 443},
		{in: "EXAMPLE.com.:8080", host: "example.com", port: 8080},
		{in: "example.com", def: 80, host: "example.com", port: 80},
		{in: "[::1]:443", host: "::1", port: 443},
		{in: "[::1]", def: 80, host: "::1", port: 80},
		{in: "[::ffff:127.0.0.1]:80", host: "::ffff:127.0.0.1", port: 80},
		{in: "1.2.3.4:1", host: "1.2.3.4", port: 1},
		{in: "xn--bcher-kva.example:443", host: "xn--bcher-kva.example", port: 443},
		{in: "example.com", mustFail: true},
		{in: "example.com:", def: 80, mustFail: true},
		{in: ":443", mustFail: true},
		{in: "::1:443", mustFail: true},
		{in: "[::1:443", mustFail: true},
		{in: "[::1]x:443", mustFail: true},
		{in: "[fe80::1%eth0]:443", mustFail: true},
		{in: "[127.0.0.1]:443", mustFail: true},
		{in: "example.com:0443", mustFail: true},
		{in: "example.com:+443", mustFail: true},
		{in: "example.com:65536", mustFail: true},
		{in: "example.com:0", mustFail: true},
		{in: "127.1:80", mustFail: true},
		{in: "0177.0.0.1:80", mustFail: true},
		{in: "0x7f.0.0.1:80", mustFail: true},
		{in: "example.123:80", mustFail: true},
		{in: "exa_mple.com:80", mustFail: true},
		{in: "-a.com:80", mustFail: true},
		{in: "a..com:80", mustFail: true},
		{in: "bücher.example:443", mustFail: true},
		{in: "xn--zz.example:443", mustFail: true},
		{in: "ab--c.example:443", mustFail: true},
		{in: "user@example.com:443", mustFail: true},
		{in: "example.com:443/path", mustFail: true},
	} {
		host, port, err := splitTarget(tc.in, tc.def)
		if tc.mustFail {
			if err == nil {
				t.Errorf("splitTarget(%q) = %q, %d; want an error", tc.in, host, port)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("splitTarget(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

// FuzzSplitTarget: any authority from the sandbox either fails or yields
// a canonical host (a fixed point of CanonicalHost) and a valid port.
func FuzzSplitTarget(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:80", "127.1:80", "xn--bcher-kva.example:1", "a.b.c.", "[fe80::1%25x]:1", "0x7f000001:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := splitTarget(s, 80)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("port %d", port)
		}
		again, err := policy.CanonicalHost(host)
		if err != nil || again != host {
			t.Fatalf("%q -> %q is not canonical (%q, %v)", s, host, again, err)
		}
		if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() != "" {
			t.Fatalf("%q -> zone %q", s, host)
		}
	})
}

// FuzzProxyConn feeds arbitrary bytes from "the sandbox" to the proxy.
// The policy allows one name whose injected answer is a loopback server
// the test started; the dialer refuses (and fails the test for) any other
// address, so a fuzzed request can never reach anything else.
func FuzzProxyConn(f *testing.F) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Second))
				io.Copy(io.Discard, io.LimitReader(c, 1<<16))
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String()
	p, err := New(Options{Resolver: newResolver("allowed.test", "127.0.0.1"), IdleTimeout: time.Second, DialTimeout: time.Second, MaxHeaderBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	pol := loopbackPolicy(port, policy.EgressRule{Host: "allowed.test", Ports: []int{port}}, policy.EgressRule{Host: "*.allowed.test"})
	var badEvent atomic.Value // string: an audit event that breaks the rules
	record := func(ev Event) {
		switch {
		case !ev.Allowed && ev.Reason == "":
			badEvent.Store(fmt.Sprintf("denial without a reason: %+v", ev))
		case strings.ContainsFunc(ev.Method+ev.Host, func(r rune) bool { return r < ' ' || r == 0x7f }):
			badEvent.Store(fmt.Sprintf("control characters in the audit record: %+v", ev))
		case ev.Tenant != "fuzz":
			badEvent.Store(fmt.Sprintf("wrong tenant: %+v", ev))
		}
	}
	eg := p.For(Scope{Tenant: "fuzz", Policy: pol, Record: record}).(*sandboxEgress)
	var bad error
	eg.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != target {
			bad = fmt.Errorf("dialled %s", addr)
			return nil, bad
		}
		return eg.dialer.DialContext(ctx, network, addr)
	}
	sock := filepath.Join(f.TempDir(), "e.sock")
	pl, err := net.Listen("unix", sock)
	if err != nil {
		f.Fatal(err)
	}
	defer pl.Close()
	go eg.Serve(pl)

	ps := strconv.Itoa(port)
	for _, s := range []string{
		"GET http://allowed.test:" + ps + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"CONNECT allowed.test:" + ps + " HTTP/1.1\r\n\r\nhello",
		"GET http://127.0.0.1:" + ps + "/ HTTP/1.1\r\nHost: x\r\n\r\nGET http://allowed.test:" + ps + "/ HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST http://allowed.test:" + ps + "/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"GET http://a.allowed.test/ HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		go func() {
			c.Write(data)
			c.(*net.UnixConn).CloseWrite()
		}()
		io.Copy(io.Discard, c)
		if bad != nil {
			t.Fatal(bad)
		}
		if msg, _ := badEvent.Load().(string); msg != "" {
			t.Fatal(msg)
		}
	})
}
