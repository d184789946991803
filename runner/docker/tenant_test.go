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
