package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// A sandbox of a tenant lives under the tenant's parent cgroup, which
// carries the tenant's CPU weight; a sandbox without a tenant directly
// under CgroupParent.
func TestTenantCgroup(t *testing.T) {
	r := newTestRunner(t)
	tenant := "fair-" + strconv.Itoa(os.Getpid())
	iso := runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso, Tenant: tenant, TenantWeight: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	plain, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(t.Context())

	dir, v2 := r.TenantGroupDirs(tenant)
	file, want := "cpu.shares", "3072" // 300 * 1024 / 100
	if v2 {
		file, want = "cpu.weight", "300"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s of the tenant's group: %q %v, want %s", file, b, err, want)
	}
	// A command running in the sandbox is in the tenant's group, in the
	// host's view of its cgroup.
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), runner.Process{Args: []string{"sleep", "3"}})
		done <- err
	}()
	wantCPU := "/" + filepath.Join(r.cfg.CgroupParent, runner.TenantCgroup(tenant), sb.ID())
	deadline := time.Now().Add(5 * time.Second)
	found := false
	for !found && time.Now().Before(deadline) {
		for _, pid := range sb.(*Sandbox).cg.procs() {
			c, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			for _, line := range strings.Split(string(c), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 && (parts[1] == "" || strings.Contains(","+parts[1]+",", ",cpu,")) && parts[2] == wantCPU {
					found = true
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !found {
		t.Fatalf("no process of the sandbox in cgroup %s (procs %v)", wantCPU, sb.(*Sandbox).cg.procs())
	}
	if got := plain.(*Sandbox).cg.rel; got != filepath.Join(r.cfg.CgroupParent, plain.ID()) {
		t.Fatalf("sandbox without a tenant in %s", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := r.Leftovers(sb.ID()); len(left) > 0 {
		t.Fatalf("left after Close: %v", left)
	}
}

// CapTenantCPU caps the tenant's group (cpu.cfs_quota_us on v1, cpu.max
// on v2) and removes the cap again; on v1 the cap is never below a live
// sandbox's own quota (the kernel refuses that), and a sandbox made while
// its tenant is capped gets at most the cap.
func TestTenantCPUCap(t *testing.T) {
	r := newTestRunner(t)
	tenant := "cap-" + strconv.Itoa(os.Getpid())
	iso := runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso, Tenant: tenant, Limits: runner.Limits{CPUMillis: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	dir, v2 := r.TenantGroupDirs(tenant)
	read := func(dir, file string) string {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	quota := func() string {
		if v2 {
			return read(dir, "cpu.max")
		}
		return read(dir, "cpu.cfs_quota_us")
	}
	check := func(millis int64, want, wantV2 string) {
		t.Helper()
		if err := r.CapTenantCPU(tenant, 0, millis); err != nil {
			t.Fatal(err)
		}
		if v2 {
			want = wantV2
		}
		if got := quota(); got != want {
			t.Fatalf("cap %d: %q, want %q", millis, got, want)
		}
	}
	check(1500, "150000", "150000 100000")
	if v2 {
		check(500, "", "50000 100000")
	} else {
		check(500, "100000", "") // the live sandbox has a whole core
	}
	second, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: iso, Tenant: tenant, Limits: runner.Limits{CPUMillis: 2000}})
	if err != nil {
		t.Fatalf("a sandbox asking more than its tenant's cap: %v", err)
	}
	defer second.Close(t.Context())
	if !v2 {
		child := filepath.Join(dir, second.ID())
		if got := read(child, "cpu.cfs_quota_us"); got != "100000" {
			t.Fatalf("quota of a sandbox made under a cap of one core: %s, want 100000", got)
		}
	}
	check(0, "-1", "max 100000")
}
