package builtin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/netclass"
)

// ssrfGuard is http_request's egress guard: a netclass.Dialer for the
// tenant's netclass.Guard (the one address check sandboxd applies to every
// connection made on a tenant's behalf), which resolves names itself,
// checks every address and dials the checked one (DNS rebinding between
// check and connect is impossible; the socket address is checked once more
// just before connect(2)).
type ssrfGuard struct {
	g *netclass.Guard
	d *netclass.Dialer
	// connected records whether any connection was made, so a request
	// refused before connecting spends no http effect.
	connected atomic.Bool
}

// newSSRFGuard guards with g (nil: public addresses only), resolving
// through lookup (nil: the system resolver).
func newSSRFGuard(g *netclass.Guard, lookup func(context.Context, string) ([]netip.Addr, error)) *ssrfGuard {
	if g == nil {
		g = netclass.NewGuard(nil, nil)
	}
	s := &ssrfGuard{g: g}
	s.d = &netclass.Dialer{Guard: g, Lookup: lookup, Connected: func(netip.AddrPort) { s.connected.Store(true) }}
	return s
}

// dialContext is the transport's only way out.
func (s *ssrfGuard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.d.DialContext(ctx, network, addr)
}

// checkRedirect re-checks every redirect hop: at most max hops, http or
// https only, and the early host check on the new URL (the dialer checks the
// addresses it resolves to).
func (s *ssrfGuard) checkRedirect(max int) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > max {
			return fmt.Errorf("stopped after %d redirects", max)
		}
		if sc := req.URL.Scheme; sc != "http" && sc != "https" {
			return fmt.Errorf("redirect to %q refused: only http and https URLs may be followed", req.URL.Redacted())
		}
		if err := s.g.CheckURL(req.URL); err != nil {
			if r, ok := err.(*netclass.Refusal); ok {
				r.Reason = fmt.Sprintf("%s (redirect to %s)", r.Reason, req.URL.Redacted())
			}
			return err
		}
		return nil
	}
}
