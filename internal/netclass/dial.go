package netclass

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Dialer connects only to addresses its Guard allows. It resolves names
// itself, checks every address, and dials the checked address, so a
// connection is pinned to an address that passed (DNS rebinding between
// check and connect gains nothing); Guard.Control checks the socket address
// once more just before connect(2). Use DialContext as an http.Transport's
// DialContext (with Proxy nil) and Guard.CheckURL in CheckRedirect: that is
// all a caller of a tenant-supplied URL needs.
type Dialer struct {
	Guard *Guard
	// Lookup resolves a name; nil: net.DefaultResolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Timeout bounds each connection attempt; 0: none beyond ctx.
	Timeout time.Duration
	// Connected, when set, is called after a connection was made (a
	// caller that spends an effect per connection counts here).
	Connected func(netip.AddrPort)
	// Dial, when set, connects to an address that passed the checks
	// (tests restrict where a connection may go); nil: a net.Dialer with
	// Guard.Control.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DialContext connects to addr ("host:port"). addr keeps the URL's host
// name, so TLS SNI and certificate checks use the name while the TCP
// connection goes to the checked address. Every address of the name is
// checked; the first allowed one that answers is used. When all are
// refused the error is the first *Refusal.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("invalid port %q", portStr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		if err := d.Guard.CheckHost(host, int(port)); err != nil {
			return nil, err
		}
		lookup := d.Lookup
		if lookup == nil {
			lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		if ips, err = lookup(ctx, host); err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("lookup %s: no addresses", host)
		}
	}
	dial := d.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: d.Timeout, Control: d.Guard.Control}).DialContext
	}
	var refused, failed []error
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), uint16(port)) // resolvers may answer A records as ::ffff:a.b.c.d
		if err := d.Guard.Check(ap); err != nil {
			if r, ok := err.(*Refusal); ok && host != ip.String() {
				r.Host = host
			}
			refused = append(refused, err)
			continue
		}
		conn, err := dial(ctx, network, ap.String())
		if err == nil {
			if d.Connected != nil {
				d.Connected(ap)
			}
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
