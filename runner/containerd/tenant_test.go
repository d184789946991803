package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// A tenant's sandbox runs under the tenant's parent cgroup (under the
// namespace's), which carries the tenant's CPU weight; the group is capped
// and uncapped (CapTenantCPU), and a sandbox made under a cap asks at
// most the cap (cgroup v1 refuses a child a larger quota than its
// parent's).
func TestTenantCgroup(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	if r.tenants == nil {
		t.Skip("this host's cgroupfs is not writable")
	}
	tenant := "fair-ctrd-" + strconv.Itoa(os.Getpid())
	dir, v2 := r.TenantCgroupDir(tenant)
	rel := filepath.Join(r.cfg.Namespace, runner.TenantCgroup(tenant))
	t.Cleanup(func() { // runc made the tenant's dir in every hierarchy
		for _, ctl := range []string{"", "cpu", "memory", "pids", "cpuacct", "devices", "freezer", "blkio", "net_cls", "perf_event", "hugetlb", "cpuset", "rdma", "misc"} {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", ctl, rel))
		}
	})
	iso := runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso, Tenant: tenant, TenantWeight: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	read := func(dir, file string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	file, want := "cpu.shares", "512" // 50 * 1024 / 100
	if v2 {
		file, want = "cpu.weight", "50"
	}
	if got := read(dir, file); got != want {
		t.Fatalf("%s of the tenant's group: %s, want %s", file, got, want)
	}
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"cat", "/proc/self/cgroup"}})
	if err != nil {
		t.Fatal(err)
	}
	if wantPath := "/" + filepath.Join(rel, sb.ID()); !strings.Contains(string(res.Stdout), wantPath+"\n") {
		t.Fatalf("the sandbox's processes are not in %s:\n%s", wantPath, res.Stdout)
	}

	if err := r.CapTenantCPU(tenant, 50, 1000); err != nil {
		t.Fatal(err)
	}
	file, want = "cpu.cfs_quota_us", "100000"
	if v2 {
		file, want = "cpu.max", "100000 100000"
	}
	if got := read(dir, file); got != want {
		t.Fatalf("%s of the capped group: %s, want %s", file, got, want)
	}
	second, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso, Tenant: tenant, TenantWeight: 50, Limits: runner.Limits{CPUMillis: 2000}})
	if err != nil {
		t.Fatalf("a sandbox asking more than its tenant's cap: %v", err)
	}
	defer second.Close(context.Background())
	if !v2 {
		if got := read(filepath.Join(dir, second.ID()), "cpu.cfs_quota_us"); got != "100000" {
			t.Fatalf("quota of a sandbox made under a cap of one core: %s, want 100000", got)
		}
	}
	if err := r.CapTenantCPU(tenant, 50, 0); err != nil {
		t.Fatal(err)
	}
	want = "-1"
	if v2 {
		want = "max 100000"
	}
	if got := read(dir, file); got != want {
		t.Fatalf("%s after the cap was removed: %s, want %s", file, got, want)
	}
	for _, s := range []runner.Sandbox{sb, second} {
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, s.ID())); err == nil {
			t.Fatalf("sandbox %s's cgroup left after Close", s.ID())
		}
	}
}
