package hostside

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/runner"
)

// TenantGroups are the tenants' parent cgroups of one runner (the local
// and docker runners): their CPU weight and, while tenants compete, their
// CPU cap (runner.TenantCPUCapper). The zero value is not usable: set
// Root, V2 and Parent.
type TenantGroups struct {
	Root   string // the cgroup mount holding them (v1: the cpu hierarchy)
	V2     bool
	Parent string // the runner's CgroupParent, relative to Root

	mu      sync.Mutex
	weights map[string]int              // groups made, with their weight
	caps    map[string]int64            // tenant -> cap applied, in thousandths of a core (absent: none)
	cpu     map[string]map[string]int64 // v1: tenant -> sandbox -> its CPU bandwidth (ChildCPU)
}

// Rel is the tenant's group relative to Root.
func (g *TenantGroups) Rel(tenant string) string {
	return filepath.Join(g.Parent, runner.TenantCgroup(tenant))
}

// Dir is the tenant's group's directory.
func (g *TenantGroups) Dir(tenant string) string { return filepath.Join(g.Root, g.Rel(tenant)) }

// Group makes the tenant's group with its CPU weight (once per tenant and
// weight) and returns it relative to Root.
func (g *TenantGroups) Group(tenant string, weight int) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.group(tenant, weight)
}

func (g *TenantGroups) group(tenant string, weight int) (string, error) {
	rel := g.Rel(tenant)
	if w, ok := g.weights[tenant]; ok && w == weight {
		return rel, nil
	}
	if err := SetTenantCPU(g.Root, g.Dir(tenant), g.V2, weight); err != nil {
		return "", err
	}
	if g.weights == nil {
		g.weights = map[string]int{}
	}
	g.weights[tenant] = weight
	return rel, nil
}

// ChildCPU is the CPU bandwidth (thousandths of a core) a new sandbox of
// the tenant may get: want, but on cgroup v1 at most the tenant's cap (v1
// refuses a child a larger quota than its parent's). It records the
// sandbox until ReleaseCPU, so that a lower cap is never below a live
// sandbox's quota.
func (g *TenantGroups) ChildCPU(tenant, sandbox string, want int64) int64 {
	if g.V2 || tenant == "" {
		return want
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.caps[tenant]; ok && want > c {
		want = c
	}
	if g.cpu == nil {
		g.cpu = map[string]map[string]int64{}
	}
	if g.cpu[tenant] == nil {
		g.cpu[tenant] = map[string]int64{}
	}
	g.cpu[tenant][sandbox] = want
	return want
}

// ReleaseCPU forgets a sandbox ChildCPU recorded (it is gone).
func (g *TenantGroups) ReleaseCPU(tenant, sandbox string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.cpu[tenant], sandbox)
}

// Cap caps the tenant's group at millis thousandths of a core (cpu.max on
// v2, cpu.cfs_quota_us on v1, over a 100 ms period); 0 removes the cap.
// On v1 the cap is at least the largest quota of the tenant's live
// sandboxes (the kernel refuses less).
func (g *TenantGroups) Cap(tenant string, weight int, millis int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.group(tenant, weight); err != nil {
		return err
	}
	if !g.V2 && millis > 0 {
		for _, c := range g.cpu[tenant] {
			millis = max(millis, c)
		}
	}
	if err := SetTenantCPUMax(g.Dir(tenant), g.V2, millis); err != nil {
		return err
	}
	if g.caps == nil {
		g.caps = map[string]int64{}
	}
	if millis > 0 {
		g.caps[tenant] = millis
	} else {
		delete(g.caps, tenant)
	}
	return nil
}

// tenantCPUPeriod is the CFS period of a tenant's cap, in microseconds.
const tenantCPUPeriod = 100_000

// SetTenantCPUMax writes a tenant group's CPU cap: millis thousandths of
// a core per period, 0 for none.
func SetTenantCPUMax(dir string, v2 bool, millis int64) error {
	quota := "-1"
	if millis > 0 {
		quota = strconv.FormatInt(max(millis*tenantCPUPeriod/1000, 1000), 10)
	}
	if v2 {
		if millis <= 0 {
			quota = "max"
		}
		return writeCgroup(filepath.Join(dir, "cpu.max"), quota+" "+strconv.Itoa(tenantCPUPeriod))
	}
	if millis > 0 { // the period first: a quota is checked against it
		if err := writeCgroup(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(tenantCPUPeriod)); err != nil {
			return err
		}
	}
	return writeCgroup(filepath.Join(dir, "cpu.cfs_quota_us"), quota)
}

// SetTenantCPU makes the tenant's parent cgroup dir (under a cgroup v1
// cpu hierarchy, or the v2 unified one) and sets its CPU weight:
// cpu.shares on v1, cpu.weight on v2 (runner.CPUWeight), so the sandboxes
// under it share that weight against other tenants'. On v2 the cpu,
// memory and pids controllers are enabled down to it, from root (a
// mount point) to dir.
func SetTenantCPU(root, dir string, v2 bool, weight int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tenant cgroup: %w", err)
	}
	w, shares := runner.CPUWeight(weight)
	if !v2 {
		return writeCgroup(filepath.Join(dir, "cpu.shares"), strconv.FormatUint(shares, 10))
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("tenant cgroup %s is not under %s", dir, root)
	}
	// Every ancestor of the tenant's group (root included) delegates the
	// controllers its children use; the tenant's group too, for its
	// sandboxes.
	p := root
	for _, part := range append(strings.Split(rel, "/"), "") {
		if err := writeCgroup(filepath.Join(p, "cgroup.subtree_control"), "+cpu +memory +pids"); err != nil {
			return err
		}
		p = filepath.Join(p, part)
	}
	return writeCgroup(filepath.Join(dir, "cpu.weight"), strconv.FormatUint(w, 10))
}

func writeCgroup(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		return fmt.Errorf("tenant cgroup: write %s: %w", path, err)
	}
	return nil
}

// HostTenantGroups are the tenant groups under parent on this host's
// cgroupfs for a runtime that uses it directly (runc with the cgroupfs
// driver): the v1 cpu hierarchy when it is mounted (cgroup v1 or
// hybrid), else the v2 unified one; nil when neither is writable here.
func HostTenantGroups(parent string) *TenantGroups {
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.shares"):
		return &TenantGroups{Root: "/sys/fs/cgroup/cpu", Parent: parent}
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		return &TenantGroups{Root: "/sys/fs/cgroup", V2: true, Parent: parent}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
