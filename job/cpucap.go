package job

import (
	"context"
	"log/slog"
	"runtime"
	"sync"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runner"
)

// cpuCaps caps the tenants whose sandboxes compete for the host's CPU.
//
// A tenant's parent cgroup carries its weight (SandboxSpec.TenantWeight),
// but weights do not keep another tenant's latency: twenty fork bombs keep
// hundreds of tasks runnable, and a quiet tenant's print(1) in a pooled
// sandbox then took 3-5 s now and then (p50 20 ms), although its group had
// half the weight. A hard cap does: while two or more tenants have a
// sandboxed job running, each of them is capped at its weighted share of
// the host's CPUs (ncpu * weight / the running tenants' total weight);
// when one tenant is left it is uncapped again, so a tenant alone still
// has the whole host. A cap is written before the job that makes its
// tenant compete starts running, so that job never waits for the cap.
//
// Running jobs count (one-shot and session calls) and sandboxes being
// made (Service.create: a quiet tenant's pool refill, between its calls,
// must not compete with an uncapped noisy tenant), not idle pooled or
// session sandboxes. The caps are this process's view: sandboxd processes
// sharing a host and tenant names share the tenant's group and its cap.
type cpuCaps struct {
	capper runner.TenantCPUCapper
	shares map[string]config.TenantShare
	ncpu   int64 // thousandths of a core
	log    *slog.Logger

	mu      sync.Mutex
	running map[string]int   // tenant -> sandboxed jobs running
	capped  map[string]int64 // tenant -> cap applied
}

// newCPUCaps: nil (no caps) unless tenants are grouped and the runner
// can cap them.
func newCPUCaps(s *Service) *cpuCaps {
	c, ok := s.r.(runner.TenantCPUCapper)
	if !ok || !s.tenantCPU() {
		return nil
	}
	return &cpuCaps{capper: c, shares: s.cfg.Shares, ncpu: int64(runtime.NumCPU()) * 1000, log: s.log,
		running: map[string]int{}, capped: map[string]int64{}}
}

func (c *cpuCaps) weight(tenant string) int {
	if w := c.shares[tenant].Weight; w > 0 {
		return w
	}
	return config.DefaultTenantWeight
}

// enter counts a sandboxed job of tenant as running until the returned
// leave; nil-safe.
func (c *cpuCaps) enter(tenant string) (leave func()) {
	if c == nil || tenant == "" {
		return func() {}
	}
	c.mu.Lock()
	c.running[tenant]++
	if c.running[tenant] == 1 {
		c.apply()
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.running[tenant]--; c.running[tenant] <= 0 {
			delete(c.running, tenant)
			c.apply()
		}
	}
}

// want is each tenant's cap for the running set; called with mu held.
func (c *cpuCaps) want() map[string]int64 {
	out := map[string]int64{}
	if len(c.running) < 2 {
		return out
	}
	total := 0
	for t := range c.running {
		total += c.weight(t)
	}
	for t := range c.running {
		out[t] = max(c.ncpu*int64(c.weight(t))/int64(total), 10)
	}
	return out
}

// apply writes the caps that changed; called with mu held. A failed
// write is logged: the weights still apply.
func (c *cpuCaps) apply() {
	want := c.want()
	for t, m := range want {
		if c.capped[t] == m {
			continue
		}
		if err := c.capper.CapTenantCPU(t, c.shares[t].Weight, m); err != nil {
			c.log.Warn("cap tenant CPU", "tenant", t, "millis", m, "err", err)
			continue
		}
		c.capped[t] = m
	}
	for t := range c.capped {
		if _, ok := want[t]; ok {
			continue
		}
		if err := c.capper.CapTenantCPU(t, c.shares[t].Weight, 0); err != nil {
			c.log.Warn("uncap tenant CPU", "tenant", t, "err", err)
			continue
		}
		delete(c.capped, t)
	}
}

// create is the runner's Create, counted as its tenant's CPU use.
func (s *Service) create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	defer s.cpu.enter(spec.Tenant)()
	return s.r.Create(ctx, spec)
}
