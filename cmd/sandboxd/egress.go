package main

import (
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
