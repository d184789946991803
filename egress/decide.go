package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
)

// denial is a refused or failed request: the status and the plain-text
// reason the sandbox reads.
type denial struct {
	status int
	reason string
	// allowed: the policy allowed the request but it failed later
	// (resolve, connect).
	allowed bool
}

func (d *denial) Error() string { return d.reason }

func deny(format string, args ...any) *denial {
	return &denial{status: http.StatusForbidden, reason: fmt.Sprintf(format, args...)}
}

// splitTarget parses an authority ("host:port", "[v6]:port", or "host"
// when defaultPort > 0) from the sandbox. The host comes back canonical
// (policy.CanonicalHost). Anything unusual is an error: unbracketed IPv6,
// empty or non-decimal ports, leading zeros, signs, ports out of range.
func splitTarget(authority string, defaultPort int) (host string, port int, err error) {
	if authority == "" {
		return "", 0, errors.New("no host")
	}
	h, p := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("%q: missing ']'", authority)
		}
		h, p = authority[:end+1], authority[end+1:]
		if p != "" {
			var ok bool
			if p, ok = strings.CutPrefix(p, ":"); !ok {
				return "", 0, fmt.Errorf("%q: junk after ']'", authority)
			}
			if p == "" {
				return "", 0, fmt.Errorf("%q: empty port", authority)
			}
		}
	} else if i := strings.IndexByte(authority, ':'); i >= 0 {
		if strings.IndexByte(authority[i+1:], ':') >= 0 {
			return "", 0, fmt.Errorf("%q: write IPv6 addresses in brackets", authority)
		}
		h, p = authority[:i], authority[i+1:]
		if p == "" {
			return "", 0, fmt.Errorf("%q: empty port", authority)
		}
	}
	switch {
	case p == "" && defaultPort > 0:
		port = defaultPort
	case p == "":
		return "", 0, fmt.Errorf("%q: a port is required (host:port)", authority)
	default:
		if len(p) > 5 || p[0] == '0' {
			return "", 0, fmt.Errorf("%q: invalid port", authority)
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return "", 0, fmt.Errorf("%q: invalid port", authority)
			}
		}
		port, _ = strconv.Atoi(p)
		if port < 1 || port > 65535 {
			return "", 0, fmt.Errorf("%q: port out of range", authority)
		}
	}
	host, err = policy.CanonicalHost(h)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// decide applies the policy to method on host:port (host canonical) and
// returns the addresses that may be dialled, in resolver order, and the
// matching rule.
func (e *sandboxEgress) decide(ctx context.Context, method, host string, port int) (ips []netip.Addr, rule int, d *denial) {
	pol := e.scope.Policy
	if e.policyErr != nil {
		return nil, -1, deny("egress denied: the egress policy of tenant %q is invalid", e.scope.Tenant)
	}
	rule, ok := pol.Match(method, host, port)
	if !ok {
		return nil, -1, deny("egress denied: no rule in the egress allowlist of tenant %q allows %s to %s",
			e.scope.Tenant, method, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, e.p.opts.DialTimeout)
		addrs, err = e.p.opts.Resolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err != nil {
			return nil, rule, &denial{status: http.StatusBadGateway, allowed: true, reason: fmt.Sprintf("egress: could not resolve %s: %v", host, err)}
		}
		if len(addrs) == 0 {
			return nil, rule, &denial{status: http.StatusBadGateway, allowed: true, reason: fmt.Sprintf("egress: %s has no addresses", host)}
		}
	}
	var refused []string
	for _, ip := range addrs {
		ip = ip.Unmap()
		if err := e.guard.Check(netip.AddrPortFrom(ip, uint16(port))); err != nil {
			reason := err.Error()
			if r, ok := err.(*netclass.Refusal); ok {
				reason = r.Reason
			}
			refused = append(refused, fmt.Sprintf("%s (%s)", ip, reason))
			continue
		}
		ips = append(ips, ip)
	}
	if len(ips) == 0 {
		if len(refused) == 0 {
			refused = []string{"no valid address"}
		}
		return nil, rule, deny("egress denied: %s resolves only to refused addresses: %s", host, strings.Join(refused, ", "))
	}
	return ips, rule, nil
}

// connect dials the first checked address that answers.
func (e *sandboxEgress) connect(ctx context.Context, ips []netip.Addr, port int) (net.Conn, netip.Addr, *denial) {
	var errs []string
	timeout := false
	for _, ip := range ips {
		dctx, cancel := context.WithTimeout(ctx, e.p.opts.DialTimeout)
		c, err := e.dial(dctx, "tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		cancel()
		if err == nil {
			return c, ip, nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
			timeout = true
		}
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	status := http.StatusBadGateway
	if timeout {
		status = http.StatusGatewayTimeout
	}
	return nil, ips[0], &denial{status: status, allowed: true, reason: "egress: could not connect: " + strings.Join(errs, "; ")}
}
