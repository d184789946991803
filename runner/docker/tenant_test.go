package docker

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

// A tenant's container runs under the tenant's parent cgroup
// (--cgroup-parent), which carries the tenant's CPU weight.
func TestTenantCgroup(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	dir, v2 := r.TenantCgroupDir("x")
	if dir == "" {
		t.Skip("the daemon's cgroups are not this host's cgroupfs")
	}
	tenant := "fair-docker-" + strconv.Itoa(os.Getpid())
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Tenant: tenant, TenantWeight: 50})
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = r.TenantCgroupDir(tenant)
	t.Cleanup(func() {
		_ = sb.Close(context.Background())
		_ = os.Remove(dir) // empty once the container is gone
	})
	file, want := "cpu.shares", "512" // 50 * 1024 / 100
	if v2 {
		file, want = "cpu.weight", "50"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s of the tenant's group: %q %v, want %s", file, b, err, want)
	}
	insp, err := r.inspect(t.Context(), sb.(*Sandbox).ContainerID())
	if err != nil {
		t.Fatal(err)
	}
	wantParent := "/" + filepath.Join(r.cfg.CgroupParent, runner.TenantCgroup(tenant))
	if insp.HostConfig.CgroupParent != wantParent {
		t.Fatalf("CgroupParent %q, want %q", insp.HostConfig.CgroupParent, wantParent)
	}
	// The agent (the container's init) as the kernel sees it.
	c, err := os.ReadFile("/proc/" + strconv.Itoa(insp.State.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(c), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (v2 && parts[1] == "" || strings.Contains(","+parts[1]+",", ",cpu,")) &&
			strings.HasPrefix(parts[2], wantParent+"/") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the agent's cgroups are not under %s:\n%s", wantParent, c)
	}
}

// A tenant's group is capped and uncapped (CapTenantCPU); a container made
// while its tenant is capped asks at most the cap (cgroup v1 refuses a
// child a larger quota than its parent's, and the container would not
// start).
func TestTenantCPUCap(t *testing.T) {
	r := newTestRunner(t, Config{ReconcileInterval: -1})
	if dir, _ := r.TenantCgroupDir("x"); dir == "" {
		t.Skip("the daemon's cgroups are not this host's cgroupfs")
	}
	tenant := "cap-docker-" + strconv.Itoa(os.Getpid())
	dir, v2 := r.TenantCgroupDir(tenant)
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := r.CapTenantCPU(tenant, 0, 1000); err != nil {
		t.Fatal(err)
	}
	file, want := "cpu.cfs_quota_us", "100000"
	if v2 {
		file, want = "cpu.max", "100000 100000"
	}
	if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s of the capped group: %q %v, want %s", file, b, err, want)
	}
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone),
		Tenant: tenant, Limits: runner.Limits{CPUMillis: 2000}})
	if err != nil {
		t.Fatalf("a sandbox asking more than its tenant's cap: %v", err)
	}
	defer sb.Close(context.Background())
	insp, err := r.inspect(t.Context(), sb.(*Sandbox).ContainerID())
	if err != nil {
		t.Fatal(err)
	}
	if wantNano := int64(2e9); v2 && insp.HostConfig.NanoCPUs != wantNano || !v2 && insp.HostConfig.NanoCPUs != 1e9 {
		t.Fatalf("NanoCPUs %d under a cap of one core (v2 %v)", insp.HostConfig.NanoCPUs, v2)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.CapTenantCPU(tenant, 0, 0); err != nil {
		t.Fatal(err)
	}
	want = "-1"
	if v2 {
		want = "max 100000"
	}
	if b, _ := os.ReadFile(filepath.Join(dir, file)); strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s after the cap was removed: %q, want %s", file, b, want)
	}
}
