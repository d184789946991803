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
