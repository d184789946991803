package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if h.v2 || h.mounts["cpu"] != "/sys/fs/cgroup/cpu,cpuacct" || h.mounts["cpuacct"] != "/sys/fs/cgroup/cpu,cpuacct" || h.mounts["memory"] != "/sys/fs/cgroup/memory" {
		t.Fatalf("%+v", h)
	}
	// Co-mounted controllers share one directory per group.
	if got := len(h.group("p/x").paths()); got != 4 {
		t.Fatalf("paths %v", h.group("p/x").paths())
	}
	if _, err := parseCgroupMounts(strings.NewReader(mi[:strings.Index(mi, "33 ")])); err == nil {
		t.Fatal("missing pids controller accepted")
	}
}

// TestCgroupV2Files drives the v2 code against a directory standing in for
// /sys/fs/cgroup (this host's cgroup v2 has no controllers to test with).
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
	g := h.group("sandboxd/sbx")
	if err := g.create(runner.Limits{MemoryBytes: 64 << 20, PIDs: 32, CPUMillis: 500}); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(root, "sandboxd", "sbx")
	for file, want := range map[string]string{
		"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "32", "cpu.max": "50000 100000",
		"../cgroup.subtree_control": "+memory +pids +cpu",
	} {
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
	_ = os.WriteFile(filepath.Join(d, "cpu.stat"), []byte("usage_usec 1500\nuser_usec 1000\n"), 0o644)
	_ = os.WriteFile(filepath.Join(d, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"), 0o644)
	_ = os.WriteFile(filepath.Join(d, "memory.peak"), []byte("12345\n"), 0o644)
	c := g.counters()
	if c.cpu != 1500*time.Microsecond || c.oomKill != 2 || g.peak() != 12345 {
		t.Fatalf("counters %+v peak %d", c, g.peak())
	}
}
