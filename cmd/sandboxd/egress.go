package main

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// egressProvider binds the shared egress proxy to each tenant's allowlist
// (job.EgressProvider). A tenant without a policy gets a nil allowlist:
// its sandboxes with the http effect can reach nothing.
type egressProvider struct {
	proxy    *egress.Proxy
	policies map[string]*policy.EgressPolicy
}

func newEgressProvider(p *egress.Proxy, policies map[string]policy.TenantPolicy) *egressProvider {
	e := &egressProvider{proxy: p, policies: map[string]*policy.EgressPolicy{}}
	for t, tp := range policies {
		eg := tp.Egress
		e.policies[t] = &eg
	}
	return e
}

func (e *egressProvider) For(tenant, session string, record func(job.EgressRecord)) runner.Egress {
	return e.proxy.For(egress.Scope{
		Tenant: tenant, Session: session, Policy: e.policies[tenant],
		Record: func(ev egress.Event) {
			r := job.EgressRecord{
				Time: ev.Time.UTC(), Method: ev.Method, Host: ev.Host, Port: ev.Port,
				Allowed: ev.Allowed, Rule: ev.Rule, Reason: ev.Reason, BytesOut: ev.BytesOut, BytesIn: ev.BytesIn,
			}
			if ev.IP.IsValid() {
				r.IP = ev.IP.String()
			}
			record(r)
		},
	})
}

// apiAddrs are the addresses sandboxd's API listens on (addr as in the
// config), which the egress proxy refuses whatever a tenant's policy allows.
// An empty host is every address (0.0.0.0 and ::); a name is resolved.
func apiAddrs(ctx context.Context, addr string) []netip.AddrPort {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil || port == 0 {
		return nil
	}
	var ips []netip.Addr
	switch ip, err := netip.ParseAddr(host); {
	case host == "":
		ips = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	case err == nil:
		ips = []netip.Addr{ip}
	default:
		ips, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	return out
}
