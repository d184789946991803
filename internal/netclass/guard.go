package netclass

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// Guard is the one check of every address sandboxd connects to on a
// tenant's behalf: the egress proxy (every connection of a sandbox), the
// in-process http_request tool, and any URL sandboxd calls for a tenant
// (completion callbacks, tool hooks: dial through a Dialer and check each
// redirect with CheckURL). An address ip:port is refused when
//
//  1. ip is of class ThisHost (0.0.0.0/8, ::, IPv6 forms carrying them or
//     IPv4 loopback, zoned or invalid addresses): always;
//  2. ip:port is one of sandboxd's own addresses (Protected): always;
//  3. ip is Special (loopback, private, link-local ...) and no prefix of
//     the tenant's allow_private_cidrs covers it, or Metadata and no prefix
//     is exactly that address.
//
// An IPv4-mapped address is judged as its IPv4 address (the kernel sends
// it there). A Guard never changes after NewGuard; safe for concurrent
// use.
type Guard struct {
	allow     []netip.Prefix
	protected *Protected
}

// NewGuard returns the guard of a tenant whose allow_private_cidrs are
// allow (nil: none) for sandboxd's addresses protected (nil: none).
func NewGuard(allow []netip.Prefix, protected *Protected) *Guard {
	g := &Guard{protected: protected}
	for _, p := range allow {
		if p.IsValid() {
			g.allow = append(g.allow, p.Masked())
		}
	}
	return g
}

// Refusal is a Guard refusing an address or a host.
type Refusal struct {
	// Host is the name or literal asked for, when known.
	Host string
	// Addr is the address refused, when known.
	Addr   netip.AddrPort
	Class  Class
	Reason string
	// Protected names the protected address ("API") when that is why.
	Protected string
}

func (r *Refusal) Error() string {
	switch {
	case r.Host != "" && r.Addr.IsValid() && r.Host != r.Addr.Addr().String():
		return fmt.Sprintf("host %q (%s) is refused: %s", r.Host, r.Addr, r.Reason)
	case r.Host != "":
		return fmt.Sprintf("host %q is refused: %s", r.Host, r.Reason)
	case r.Addr.IsValid():
		return fmt.Sprintf("%s is refused: %s", r.Addr, r.Reason)
	}
	return "refused: " + r.Reason
}

// Check returns nil when ap may be connected to, else a *Refusal.
func (g *Guard) Check(ap netip.AddrPort) error {
	ip := ap.Addr().Unmap()
	ap = netip.AddrPortFrom(ip, ap.Port())
	class, why := Judge(ip)
	if class == ThisHost {
		return &Refusal{Addr: ap, Class: class, Reason: why + ", never reachable whatever allow_private_cidrs says"}
	}
	if what := g.protected.Which(ap); what != "" {
		return &Refusal{Addr: ap, Class: class, Protected: what,
			Reason: "sandboxd's own " + what + ", never reachable on a tenant's behalf"}
	}
	if class == Public || g.allowed(ip, class) {
		return nil
	}
	return &Refusal{Addr: ap, Class: class, Reason: why}
}

func (g *Guard) allowed(ip netip.Addr, class Class) bool {
	for _, p := range g.allow {
		if !p.Contains(ip) {
			continue
		}
		if class == Metadata && p.Bits() != ip.BitLen() {
			continue // metadata only when listed as a single address
		}
		return true
	}
	return false
}

// Control is a net.Dialer.Control that checks the socket address just
// before connect(2): the last word on the address actually dialled,
// whatever path led there.
func (g *Guard) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Refusal{Class: ThisHost, Reason: fmt.Sprintf("unparseable address %q", address)}
	}
	return g.Check(ap)
}

// CheckHost is the early check of a URL's host and port, before any DNS
// lookup: a numeric host in any spelling is judged by its address, and
// only its canonical spelling (dotted decimal IPv4) is accepted;
// "localhost" names are judged as 127.0.0.1 and ::1. Other names pass
// here and are judged by the addresses they resolve to (Dialer).
func (g *Guard) CheckHost(host string, port int) error {
	if host == "" {
		return &Refusal{Class: ThisHost, Reason: "URL has no host"}
	}
	if port < 1 || port > 65535 {
		return &Refusal{Host: host, Class: ThisHost, Reason: fmt.Sprintf("port %d out of range", port)}
	}
	lower := strings.ToLower(strings.TrimSuffix(host, "."))
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") || lower == "localhost.localdomain" {
		for _, ip := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
			if err := g.Check(netip.AddrPortFrom(ip, uint16(port))); err != nil {
				r := err.(*Refusal)
				r.Host = host
				return r
			}
		}
		return nil
	}
	ip, err := parseNumericHost(host)
	switch {
	case errors.Is(err, errNotNumeric):
		return nil
	case err != nil:
		return &Refusal{Host: host, Class: ThisHost, Reason: err.Error()}
	}
	if err := g.Check(netip.AddrPortFrom(ip, uint16(port))); err != nil {
		r := err.(*Refusal)
		r.Host, r.Reason = host, fmt.Sprintf("%s (%s)", r.Reason, ip)
		return r
	}
	canon := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip.Is4() && canon != ip.String() {
		return &Refusal{Host: host, Class: Public, Reason: fmt.Sprintf("write the IPv4 address in dotted-decimal form (%s)", ip)}
	}
	return nil
}

// CheckURL is the early check of a URL sandboxd is about to request (or
// was redirected to): http or https only, and CheckHost on its host and
// port (the scheme's default when it names none).
func (g *Guard) CheckURL(u *url.URL) error {
	var port int
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return &Refusal{Host: u.Host, Class: ThisHost, Reason: fmt.Sprintf("URL scheme %q is not allowed: use http or https", u.Scheme)}
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil {
			return &Refusal{Host: u.Host, Class: ThisHost, Reason: fmt.Sprintf("invalid port %q", ps)}
		}
		port = n
	}
	return g.CheckHost(u.Hostname(), port)
}
