package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"

	"github.com/sandboxd/sandboxd/runner"
)

func TestParseCgroupMountsV1(t *testing.T) {
	t.Parallel()
	mi := `30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 30 0:29 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
34 30 0:30 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
35 30 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
`
	h, err := parseCgroupMounts(strings.NewReader(mi))
	if err != nil {
		t.Fatal(err)
	}
	if h.v2 || h.v1[cgroup1.Cpu] != "/sys/fs/cgroup/cpu,cpuacct" || h.v1[cgroup1.Cpuacct] != "/sys/fs/cgroup/cpu,cpuacct" || h.v1[cgroup1.Memory] != "/sys/fs/cgroup/memory" {
		t.Fatalf("%+v", h)
	}
	// Co-mounted controllers share one directory per group.
	if got := h.group("p/x").dirs(); len(got) != 3 {
		t.Fatalf("dirs %v", got)
	}
	if _, err := parseCgroupMounts(strings.NewReader(mi[:strings.Index(mi, "33 ")])); err == nil {
		t.Fatal("missing pids controller accepted")
	}
}

// TestCgroupV2Files drives the v2 code against a directory standing in for
// /sys/fs/cgroup (this host binds its controllers to v1; the real v2
// hierarchy is exercised under user-mode Linux: TestCgroupV2UML).
func TestCgroupV2Files(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := parseCgroupMounts(strings.NewReader("40 1 0:40 / " + root + " rw - cgroup2 cgroup2 rw\n"))
	if err != nil || !h.v2 {
		t.Fatalf("%+v %v", h, err)
	}
	// A real cgroupfs has these files in every group.
	if err := os.Mkdir(filepath.Join(root, "sandboxd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "sandboxd")} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := h.group("sandboxd/sbx")
	if err := g.create(runner.Limits{MemoryBytes: 64 << 20, PIDs: 32, CPUMillis: 500}); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(root, "sandboxd", "sbx")
	for file, want := range map[string]string{
		"memory.max": "67108864", "pids.max": "32", "cpu.max": "50000 100000",
	} {
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
	for _, dir := range []string{root, filepath.Join(root, "sandboxd")} {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil || !strings.Contains(string(b), "memory") || !strings.Contains(string(b), "pids") || !strings.Contains(string(b), "cpu") {
			t.Errorf("%s/cgroup.subtree_control = %q, %v", dir, b, err)
		}
	}
}
