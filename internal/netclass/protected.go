package netclass

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Protected is the set of addresses sandboxd itself listens on or depends
// on: its API and metrics listeners, the addresses between replicas, the
// store's server, the container daemon's or cluster's API. No connection
// made on a tenant's behalf may reach one of them, whatever the tenant's
// allowlist and allow_private_cidrs say (Guard.Check).
//
// An address of this host (unspecified, loopback, or assigned to one of
// its interfaces when added) protects its port on every address of this
// host: a listener on 0.0.0.0 or :: answers on all of them, and a daemon
// reached through 127.0.0.1 may well listen on every address too. The
// host's addresses are read again at every check of such a port, so an
// address added later is covered. Another host's address is protected
// exactly (address and port).
//
// serve feeds it every listener (AddListener, once listening: the real
// port) and dependency (AddHostPort, AddURL). Safe for concurrent use;
// the zero value is not usable, call NewProtected.
type Protected struct {
	mu         sync.RWMutex
	exact      map[netip.AddrPort]string
	localPorts map[uint16]string
	// localAddrs lists this host's interface addresses (tests replace it).
	localAddrs func() ([]netip.Addr, error)
}

// NewProtected returns an empty set.
func NewProtected() *Protected {
	return &Protected{exact: map[netip.AddrPort]string{}, localPorts: map[uint16]string{}, localAddrs: interfaceAddrs}
}

func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// Add protects ap; what names it in refusals ("API", "metrics", "docker
// daemon"). A zero port is ignored (nothing listens there yet).
func (p *Protected) Add(what string, ap netip.AddrPort) {
	if ap.Port() == 0 || !ap.Addr().IsValid() {
		return
	}
	ip := ap.Addr().Unmap().WithZone("")
	local := p.isLocal(ip)
	p.mu.Lock()
	defer p.mu.Unlock()
	if local {
		if _, ok := p.localPorts[ap.Port()]; !ok {
			p.localPorts[ap.Port()] = what
		}
		return
	}
	ap = netip.AddrPortFrom(ip, ap.Port())
	if _, ok := p.exact[ap]; !ok {
		p.exact[ap] = what
	}
}

// AddListener protects the address of a TCP listener (net.Listener.Addr);
// other kinds (unix sockets) are not reachable by TCP and are ignored.
func (p *Protected) AddListener(what string, a net.Addr) {
	if t, ok := a.(*net.TCPAddr); ok {
		p.Add(what, t.AddrPort())
	}
}

// AddHostPort protects "host:port" as a configuration writes it: an empty
// host is every address (as net.Listen reads it), a name is resolved and
// every address it has is protected.
func (p *Protected) AddHostPort(ctx context.Context, what, hostport string) error {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%s address %q: %w", what, hostport, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		if port, err = lookupPort(ps); err != nil {
			return fmt.Errorf("%s address %q: port %q: %w", what, hostport, ps, err)
		}
	}
	var ips []netip.Addr
	switch ip, perr := netip.ParseAddr(host); {
	case host == "":
		ips = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	case perr == nil:
		ips = []netip.Addr{ip}
	default:
		if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return fmt.Errorf("%s address %q: %w", what, hostport, err)
		}
	}
	for _, ip := range ips {
		p.Add(what, netip.AddrPortFrom(ip, uint16(port)))
	}
	return nil
}

func lookupPort(name string) (uint64, error) {
	n, err := net.LookupPort("tcp", name)
	return uint64(n), err
}

// defaultPorts are the ports of URL schemes without one.
var defaultPorts = map[string]string{"http": "80", "https": "443", "tcp": "2375", "ssh": "22", "postgres": "5432", "postgresql": "5432"}

// AddURL protects the address of a URL such as DOCKER_HOST
// ("tcp://10.0.0.5:2376"), a Kubernetes API server ("https://...") or a
// database ("postgres://db:5432/..."). unix:// and other socket-path
// schemes are not reachable by TCP and are ignored; an empty URL too.
func (p *Protected) AddURL(ctx context.Context, what, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s URL: %w", what, err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "unix", "npipe", "fd", "":
		return nil
	}
	if u.Host == "" {
		return fmt.Errorf("%s URL %q has no host", what, raw)
	}
	def, ok := defaultPorts[scheme]
	if !ok && u.Port() == "" {
		return fmt.Errorf("%s URL %q: no port", what, raw)
	}
	return p.AddHostPort(ctx, what, net.JoinHostPort(u.Hostname(), portOr(u.Port(), def)))
}

func portOr(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

// Which names the protected address ap is ("" when it is none). ap may be
// in any spelling (an IPv4-mapped address is its IPv4 address).
func (p *Protected) Which(ap netip.AddrPort) string {
	if p == nil {
		return ""
	}
	ip := ap.Addr().Unmap().WithZone("")
	p.mu.RLock()
	what, exact := p.exact[netip.AddrPortFrom(ip, ap.Port())]
	lwhat, localPort := p.localPorts[ap.Port()]
	p.mu.RUnlock()
	switch {
	case exact:
		return what
	case localPort && p.isLocal(ip):
		return lwhat
	}
	return ""
}

// isLocal: ip reaches this host (unspecified, loopback, one of its
// interfaces' addresses, or an IPv6 form carrying such an IPv4 address).
// When the interfaces cannot be read, every address is taken as local:
// refusing is the safe side.
func (p *Protected) isLocal(ip netip.Addr) bool {
	if c, _ := Judge(ip); c == ThisHost || ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := p.localAddrs()
	if err != nil {
		return true
	}
	return slices.Contains(addrs, ip)
}

// String lists the set, for logs.
func (p *Protected) String() string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var parts []string
	for ap, what := range p.exact {
		parts = append(parts, what+"="+ap.String())
	}
	for port, what := range p.localPorts {
		parts = append(parts, fmt.Sprintf("%s=*:%d", what, port))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
