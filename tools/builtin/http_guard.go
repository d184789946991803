package builtin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/netclass"
)

// RefusedError is the SSRF guard refusing to connect to an address.
type RefusedError struct {
	Host   string     // the name or address asked for
	Addr   netip.Addr // the address refused, when known
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Addr.IsValid() && e.Host != e.Addr.String() {
		return fmt.Sprintf("refusing to connect to %s (%s): %s address", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("refusing to connect to %s: %s", e.Host, e.Reason)
}

// ssrfGuard is http_request's egress guard. It resolves names itself, checks
// every address, and dials the checked address, so a connection is always
// pinned to an address that passed (DNS rebinding between check and connect
// is impossible). net.Dialer.Control checks the socket address once more
// just before connect(2), so no spelling or code path can slip past.
type ssrfGuard struct {
	allowPrivate bool
	lookup       func(ctx context.Context, host string) ([]netip.Addr, error)
	dialer       *net.Dialer
	// connected records whether any connection was made, so a request
	// refused before connecting spends no http effect.
	connected atomic.Bool
}

func newSSRFGuard(allowPrivate bool, lookup func(context.Context, string) ([]netip.Addr, error)) *ssrfGuard {
	g := &ssrfGuard{allowPrivate: allowPrivate, lookup: lookup}
	if g.lookup == nil {
		g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	g.dialer = &net.Dialer{Control: g.control}
	return g
}

// control runs on the raw socket before connect: the last word on the
// address actually dialled.
func (g *ssrfGuard) control(network, address string, _ syscall.RawConn) error {
	if g.allowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Host: address, Reason: "unparseable"}
	}
	if why := netclass.Classify(ap.Addr()); why != "" {
		return &RefusedError{Host: ap.Addr().String(), Addr: ap.Addr(), Reason: why}
	}
	return nil
}

// dialContext is the transport's only way out. addr keeps the URL's host
// name, so TLS SNI and certificate checks use the name while the TCP
// connection goes to the checked address.
func (g *ssrfGuard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("invalid port %q", portStr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		if !g.allowPrivate {
			if err := netclass.CheckHost(host); err != nil {
				return nil, &RefusedError{Host: host, Reason: err.Error()}
			}
		}
		ips, err = g.lookup(ctx, host)
		if err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("lookup %s: no addresses", host)
		}
	}
	var refused, failed []error
	for _, ip := range ips {
		ip = ip.Unmap() // resolvers may answer A records as ::ffff:a.b.c.d
		if !g.allowPrivate {
			if why := netclass.Classify(ip); why != "" {
				refused = append(refused, &RefusedError{Host: host, Addr: ip, Reason: why})
				continue
			}
		}
		conn, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			g.connected.Store(true)
			return conn, nil
		}
		failed = append(failed, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(failed) == 0 && len(refused) > 0 {
		return nil, refused[0]
	}
	return nil, errors.Join(append(failed, refused...)...)
}

// checkRedirect re-checks every redirect hop: at most max hops, http or
// https only, and the early host check on the new URL (the dialer checks the
// addresses it resolves to).
func (g *ssrfGuard) checkRedirect(max int) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > max {
			return fmt.Errorf("stopped after %d redirects", max)
		}
		if s := req.URL.Scheme; s != "http" && s != "https" {
			return fmt.Errorf("redirect to %q refused: only http and https URLs may be followed", req.URL.Redacted())
		}
		if !g.allowPrivate {
			if err := netclass.CheckHost(req.URL.Hostname()); err != nil {
				return &RefusedError{Host: req.URL.Hostname(), Reason: fmt.Sprintf("redirect to %s: %v", req.URL.Redacted(), err)}
			}
		}
		return nil
	}
}
