package job

import (
	"fmt"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// proxyEnv points HTTP clients inside an egress sandbox at its proxy.
var proxyEnv = []string{
	"HTTP_PROXY=http://" + runner.EgressProxyAddr,
	"HTTPS_PROXY=http://" + runner.EgressProxyAddr,
	"http_proxy=http://" + runner.EgressProxyAddr,
	"https_proxy=http://" + runner.EgressProxyAddr,
}

// specFor compiles effects into a sandbox spec: policy.Compile (the effect
// → isolation table) decides all of its isolation, which the runner
// applies as given. record receives the egress decisions of a sandbox with
// the http effect.
func (s *Service) specFor(id, tenant, session string, effects []tools.Effect, record func(EgressRecord)) (runner.SandboxSpec, error) {
	iso := policy.Compile(effects).Spec
	spec := runner.SandboxSpec{ID: id, Isolation: iso}
	if s.rep != nil {
		spec.Replica = s.rep.cfg.ID // a live replica reaps a dead one's (runner.ReplicaReaper)
	}
	if iso.Network == runner.NetworkEgress {
		if s.cfg.Egress == nil {
			return spec, errNoEgress
		}
		spec.Egress = s.cfg.Egress.For(tenant, session, record)
	}
	return spec, nil
}

// tenantCPU reports whether sandboxes are grouped by tenant: a parent
// cgroup per tenant, of the tenant's weight, shares the CPU by tenant (the
// runner's, see runner.SandboxSpec.Tenant). Only with two or more tenants
// configured: a single tenant has nobody to share with.
func (s *Service) tenantCPU() bool { return s.cfg.Tenants >= 2 }

// tenantSpec puts a sandbox of tenant in the tenant's CPU group.
func (s *Service) tenantSpec(spec *runner.SandboxSpec, tenant string) {
	if s.tenantCPU() && tenant != "" {
		spec.Tenant, spec.TenantWeight = tenant, s.cfg.Shares[tenant].Weight
	}
}

// httpOptions are the in-process http_request's options for tenant. Every
// tenant's requests pass the same address check as its sandboxes
// (netclass.Guard: its allow_private_cidrs, never sandboxd's own
// addresses); a tenant with a policy is also held to its egress allowlist.
func (s *Service) httpOptions(tenant string) *tools.HTTPOptions {
	var o tools.HTTPOptions
	if s.cfg.HTTP != nil {
		o = *s.cfg.HTTP
	}
	p, ok := s.cfg.Policies[tenant]
	if !ok {
		if o.Guard == nil {
			o.Guard = netclass.NewGuard(nil, s.cfg.Protected)
		}
		return &o
	}
	eg := p.Egress
	o.Guard = netclass.NewGuard(eg.PrivatePrefixes(), s.cfg.Protected)
	o.Allow = func(method, host string, port int) error {
		if _, ok := eg.Match(method, host, port); !ok {
			return fmt.Errorf("%s %s:%d is not in the tenant's egress allowlist", method, host, port)
		}
		return nil
	}
	return &o
}

// recordEgress appends an egress decision to a job's audit (bounded). A
// decision the proxy records after the job ended (a connection closing
// late) is written to the store too.
func (s *Service) recordEgress(e *entry, r EgressRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.job.Egress) >= maxEgressRecords {
		return
	}
	e.job.Egress = append(e.job.Egress, r)
	if e.job.State.Terminal() {
		s.storeUpdate(e.job)
	}
}

// recordSessionEgress appends an egress decision to the session's current
// job (its jobs run one at a time).
func (s *Service) recordSessionEgress(ls *liveSession, r EgressRecord) {
	ls.mu.Lock()
	id := ls.current
	ls.mu.Unlock()
	if id == "" {
		return
	}
	if e := s.entry(id); e != nil {
		s.recordEgress(e, r)
	}
}
