package runnertest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// Egress checks NetworkEgress end to end with a real egress.Proxy on the
// host: a program in the sandbox reaches an allowlisted origin (a loopback
// server this test starts, under a name only the proxy's injected resolver
// knows) through HTTP_PROXY, is refused (403) anywhere else, cannot connect
// to anything directly, and the runner stops serving the egress socket at
// Close. NetworkNone sandboxes of the same runner still cannot open inet
// sockets.
func (s *suite) testEgress(t *testing.T) {
	s.need(t, s.caps.Network, "network egress")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from origin %s %s", r.Method, r.URL.Path)
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port

	// A listener on a non-loopback address of this host, on the same
	// port range: the sandbox must not reach it directly either.
	direct, directAddr := hostListener(t)
	var directHits atomic.Int32
	if direct != nil {
		defer direct.Close()
		go func() {
			for {
				c, err := direct.Accept()
				if err != nil {
					return
				}
				directHits.Add(1)
				c.Close()
			}
		}()
	}

	var (
		mu     sync.Mutex
		events []egress.Event
	)
	proxy, err := egress.New(egress.Options{
		Resolver:    staticResolver{"allowed.test": netip.MustParseAddr("127.0.0.1"), "denied.test": netip.MustParseAddr("127.0.0.1")},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	eg := &observedEgress{inner: proxy.For(egress.Scope{
		Tenant: "conformance",
		Policy: &policy.EgressPolicy{
			Allow:             []policy.EgressRule{{Host: "allowed.test", Ports: []int{port}}},
			AllowPrivateCIDRs: []string{"127.0.0.0/8"},
		},
		Record: func(ev egress.Event) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		},
	})}

	sb := s.sandbox(t, runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: eg})
	proxyURL := "http://" + runner.EgressProxyAddr
	script := fmt.Sprintf(`import socket, urllib.request, urllib.error
port = %d
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return "%%d %%s" %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%%d %%s" %% (e.code, e.read().decode().strip())
    except Exception as e:
        return "error %%r" %% (e,)
print("ALLOWED", fetch("http://allowed.test:%%d/ok" %% port))
print("DENIED", fetch("http://denied.test:%%d/no" %% port))
# CONNECT tunnel, plain HTTP inside it.
try:
    c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    c.sendall(b"CONNECT allowed.test:%%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n" %% port)
    head = b""
    while b"\r\n\r\n" not in head:
        b = c.recv(1)
        if not b:
            break
        head += b
    c.sendall(b"GET /tunnel HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
    body = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        body += b
    print("TUNNEL", head.split(b"\r\n")[0].decode(), body.split(b"\r\n\r\n", 1)[-1].decode())
except Exception as e:
    print("TUNNEL error %%r" %% (e,))
for host, p in %s:
    try:
        socket.create_connection((host, p), timeout=2).close()
        print("DIRECT CONNECTED", host, p)
    except OSError as e:
        print("DIRECT failed", host, p, e)
`, port, directTargets(port, directAddr))
	res := s.exec(t, sb, runner.Process{
		Args:    []string{s.f.Python, "-c", script},
		Env:     []string{"HTTP_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "https_proxy=" + proxyURL},
		Timeout: 60 * time.Second,
	})
	mustOK(t, res)
	out := string(res.Stdout)
	t.Logf("sandbox output:\n%s", out)
	if !strings.Contains(out, "ALLOWED 200 hello from origin GET /ok") {
		t.Errorf("allowlisted fetch through the proxy failed:\n%s", out)
	}
	if !strings.Contains(out, "DENIED 403 egress denied:") {
		t.Errorf("non-allowlisted fetch not refused with 403:\n%s", out)
	}
	if !strings.Contains(out, "TUNNEL HTTP/1.1 200 Connection established hello from origin GET /tunnel") {
		t.Errorf("CONNECT tunnel failed:\n%s", out)
	}
	if strings.Contains(out, "DIRECT CONNECTED") || strings.Count(out, "DIRECT failed") == 0 {
		t.Errorf("sandbox connected directly:\n%s", out)
	}
	if n := directHits.Load(); n > 0 {
		t.Errorf("host listener %s accepted %d connections from the sandbox", directAddr, n)
	}
	// A tunnel is recorded when it closes, which may come just after the
	// Exec returned: poll briefly.
	var allowed, denied int
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		allowed, denied = 0, 0
		mu.Lock()
		for _, ev := range events {
			switch {
			case ev.Allowed && ev.Host == "allowed.test":
				allowed++
			case !ev.Allowed && ev.Host == "denied.test" && ev.Status == http.StatusForbidden:
				denied++
			}
		}
		mu.Unlock()
		if (allowed >= 2 && denied == 1) || time.Now().After(deadline) {
			break
		}
	}
	if allowed < 2 || denied != 1 {
		t.Errorf("proxy recorded %d allowed and %d denied requests, want 2 and 1", allowed, denied)
	}

	// With an agent, the REPL (the code too) finds the proxy in its
	// environment, set by the agent's forwarder.
	if as, ok := sb.(runner.AgentSandbox); ok {
		r, err := as.Agent().REPL(t.Context(), replRequest(fmt.Sprintf(`import os, urllib.request
urllib.request.urlopen("http://allowed.test:%d/repl", timeout=10).read().decode() + " via " + os.environ["HTTP_PROXY"]`, port)), nil)
		if err != nil || !r.OK || r.Value != fmt.Sprintf("'hello from origin GET /repl via %s'", proxyURL) {
			t.Errorf("egress from the REPL: %v %+v", err, r)
		}
	}

	// Close stops serving the sandbox's egress socket.
	if err := sb.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for eg.active.Load() > 0 || eg.started.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Egress.Serve still running after Close (started %d, active %d)", eg.started.Load(), eg.active.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A NetworkNone sandbox of the same runner still has no inet sockets.
	if s.caps.Seccomp {
		none := s.sandbox(t, runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		res := s.py(t, none, `import socket, errno
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    print("OPENED")
except OSError as e:
    print("denied", errno.errorcode.get(e.errno))`)
		if !strings.Contains(string(res.Stdout), "denied EPERM") {
			t.Errorf("NetworkNone sandbox after an egress sandbox: %s %s", res.Stdout, res.Stderr)
		}
	}
}

func (s *suite) testEgressNeedsEgress(t *testing.T) {
	s.need(t, s.caps.Network, "network egress")
	_, err := s.r.Create(t.Context(), runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkEgress)})
	if err == nil {
		t.Fatal("Create with NetworkEgress and no Egress succeeded")
	}
}

// observedEgress counts Serve calls that have not returned.
type observedEgress struct {
	inner           runner.Egress
	started, active atomic.Int32
}

func (o *observedEgress) Serve(l net.Listener) error {
	o.started.Add(1)
	o.active.Add(1)
	defer o.active.Add(-1)
	return o.inner.Serve(l)
}

// staticResolver answers from a table and never asks real DNS.
type staticResolver map[string]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// hostListener listens on the first non-loopback IPv4 address of this
// host, or returns nil when there is none.
func hostListener(t *testing.T) (net.Listener, string) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, ""
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ipn.IP.String(), "0"))
		if err != nil {
			continue
		}
		return l, l.Addr().String()
	}
	t.Log("no non-loopback IPv4 address on this host: direct-connect check covers loopback only")
	return nil, ""
}

// directTargets is a Python list of (host, port) the sandbox must not
// reach: the origin on the host's loopback, and the host listener.
func directTargets(originPort int, hostAddr string) string {
	targets := []string{fmt.Sprintf("(%q, %d)", "127.0.0.1", originPort)}
	if ap, err := netip.ParseAddrPort(hostAddr); err == nil {
		targets = append(targets, fmt.Sprintf("(%q, %d)", ap.Addr().String(), ap.Port()))
	}
	return "[" + strings.Join(targets, ", ") + "]"
}
