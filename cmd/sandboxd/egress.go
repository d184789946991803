package main

import (
	"context"
	"log/slog"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/netclass"
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

func newEgressProvider(p *egress.Proxy, policies map[string]policy.TenantPolicy, scopes map[string]policy.EgressPolicy) *egressProvider {
	e := &egressProvider{proxy: p, policies: map[string]*policy.EgressPolicy{}}
	for t, tp := range policies {
		eg := tp.Egress
		e.policies[t] = &eg
	}
	// Tool providers' sandboxes pass their own allowlists (scopes
	// "provider:<name>"; a tenant cannot be named so).
	for scope, eg := range scopes {
		e.policies[scope] = &eg
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

// protectedAddrs is the set of sandboxd's own addresses that no connection
// made on a tenant's behalf (egress proxy, http_request) may reach: the
// API's and the metrics listener's addresses as configured (a name
// resolved; each listener's real address joins them once listening) and
// the runner's daemon (DOCKER_HOST when tcp).
// Every new listener (metrics, replicas) and network dependency (a
// Postgres store, a Kubernetes API server) must be added here: Add,
// AddListener, AddHostPort or AddURL.
func protectedAddrs(ctx context.Context, cfg *config.Config, r runner.Runner, log *slog.Logger) *netclass.Protected {
	p := netclass.NewProtected()
	for name, addr := range map[string]string{"API": cfg.Addr, "metrics": cfg.MetricsAddr} {
		if err := p.AddHostPort(ctx, name, addr); err != nil {
			log.Warn("protected addresses", "err", err) // listening fails the same way
		}
	}
	if d, ok := r.(runner.Dependent); ok {
		for _, u := range d.Dependencies() {
			if err := p.AddURL(ctx, r.Name()+" daemon", u); err != nil {
				log.Warn("protected addresses", "err", err)
			}
		}
	}
	return p
}
