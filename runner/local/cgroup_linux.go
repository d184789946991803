package local

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runner"
)

// cgroupHost describes the cgroup layout found at New.
type cgroupHost struct {
	v2     bool
	root2  string            // v2 mount point
	mounts map[string]string // v1 controller -> mount point
	memsw  bool              // v1 memory.memsw.* present (swap accounting)
}

var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// detectCgroups reads /proc/self/mountinfo. A unified /sys/fs/cgroup (or a
// cgroup2 mount with memory+pids+cpu enabled and no v1 memory controller)
// selects v2; otherwise the v1 controllers are used.
func detectCgroups() (*cgroupHost, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCgroupMounts(f)
}

func parseCgroupMounts(mountinfo io.Reader) (*cgroupHost, error) {
	h := &cgroupHost{mounts: map[string]string{}}
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		line := sc.Text()
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		pre, post := strings.Fields(line[:sep]), strings.Fields(line[sep+3:])
		if len(pre) < 5 || len(post) < 3 {
			continue
		}
		mp := unescapeMount(pre[4])
		switch post[0] {
		case "cgroup2":
			if h.root2 == "" || mp == "/sys/fs/cgroup" {
				h.root2 = mp
			}
		case "cgroup":
			for _, o := range strings.Split(post[2], ",") {
				for _, c := range v1Controllers {
					if o == c {
						if _, ok := h.mounts[c]; !ok {
							h.mounts[c] = mp
						}
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if _, ok := h.mounts["memory"]; !ok && h.root2 != "" {
		ctrl, _ := os.ReadFile(filepath.Join(h.root2, "cgroup.controllers"))
		have := strings.Fields(string(ctrl))
		if contains(have, "memory") && contains(have, "pids") && contains(have, "cpu") {
			h.v2 = true
			return h, nil
		}
	}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if _, ok := h.mounts[c]; !ok {
			return nil, fmt.Errorf("cgroup v1 controller %q not mounted and no usable cgroup v2", c)
		}
	}
	if _, err := os.Stat(filepath.Join(h.mounts["memory"], "memory.memsw.limit_in_bytes")); err == nil {
		h.memsw = true
	}
	return h, nil
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cgroup is one sandbox's group (one directory per v1 controller, or one v2
// directory).
type cgroup struct {
	h    *cgroupHost
	rel  string            // parent/id
	dirs map[string]string // controller (or "unified") -> directory
}

func (h *cgroupHost) group(rel string) *cgroup {
	g := &cgroup{h: h, rel: rel, dirs: map[string]string{}}
	if h.v2 {
		g.dirs["unified"] = filepath.Join(h.root2, rel)
	} else {
		for _, c := range v1Controllers {
			g.dirs[c] = filepath.Join(h.mounts[c], rel)
		}
	}
	return g
}

// paths lists the directories of g, deduplicated (co-mounted controllers).
func (g *cgroup) paths() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range append([]string{"unified"}, v1Controllers...) {
		if d, ok := g.dirs[c]; ok && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func writeFile(path, val string) error {
	if err := os.WriteFile(path, []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup write %s=%q: %w", path, val, err)
	}
	return nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKey reads "key value" lines (memory.events, memory.oom_control, cpu.stat).
func readKey(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q", path, key)
}

// create makes the group and sets its limits.
func (g *cgroup) create(l runner.Limits) error {
	if g.h.v2 {
		return g.createV2(l)
	}
	for _, d := range g.paths() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	mem := strconv.FormatInt(l.MemoryBytes, 10)
	if err := writeFile(filepath.Join(g.dirs["memory"], "memory.limit_in_bytes"), mem); err != nil {
		return err
	}
	if g.h.memsw {
		if err := writeFile(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes"), mem); err != nil {
			return err
		}
	} else {
		// Without swap accounting, keep the group out of swap as far as v1
		// allows.
		_ = writeFile(filepath.Join(g.dirs["memory"], "memory.swappiness"), "0")
	}
	if err := writeFile(filepath.Join(g.dirs["pids"], "pids.max"), strconv.FormatInt(l.PIDs, 10)); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(g.dirs["cpu"], "cpu.cfs_period_us"), "100000"); err != nil {
		return err
	}
	return writeFile(filepath.Join(g.dirs["cpu"], "cpu.cfs_quota_us"), strconv.FormatInt(max(l.CPUMillis*100, 1000), 10))
}

func (g *cgroup) createV2(l runner.Limits) error {
	// Enable the controllers on every level from the root down to the
	// parent of the sandbox group.
	dir := g.h.root2
	for _, part := range strings.Split(filepath.Dir(g.rel), "/") {
		_ = writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids +cpu")
		dir = filepath.Join(dir, part)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids +cpu"); err != nil {
		return err
	}
	d := g.dirs["unified"]
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup: %w", err)
	}
	if err := writeFile(filepath.Join(d, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
		return err
	}
	_ = writeFile(filepath.Join(d, "memory.swap.max"), "0") // absent without swap
	if err := writeFile(filepath.Join(d, "pids.max"), strconv.FormatInt(l.PIDs, 10)); err != nil {
		return err
	}
	return writeFile(filepath.Join(d, "cpu.max"), fmt.Sprintf("%d 100000", max(l.CPUMillis*100, 1000)))
}

// add moves pid into the group.
func (g *cgroup) add(pid int) error {
	for _, d := range g.paths() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// counters are sampled before and after an Exec.
type counters struct {
	cpu     time.Duration
	oomKill int64
}

func (g *cgroup) counters() counters {
	var c counters
	if g.h.v2 {
		d := g.dirs["unified"]
		if us, err := readKey(filepath.Join(d, "cpu.stat"), "usage_usec"); err == nil {
			c.cpu = time.Duration(us) * time.Microsecond
		}
		c.oomKill, _ = readKey(filepath.Join(d, "memory.events"), "oom_kill")
		return c
	}
	if ns, err := readInt(filepath.Join(g.dirs["cpuacct"], "cpuacct.usage")); err == nil {
		c.cpu = time.Duration(ns)
	}
	c.oomKill, _ = readKey(filepath.Join(g.dirs["memory"], "memory.oom_control"), "oom_kill")
	return c
}

// resetPeak restarts peak-memory tracking (v1 only; v2's memory.peak is the
// group's lifetime peak).
func (g *cgroup) resetPeak() {
	if !g.h.v2 {
		_ = writeFile(filepath.Join(g.dirs["memory"], "memory.max_usage_in_bytes"), "0")
	}
}

func (g *cgroup) peak() int64 {
	if g.h.v2 {
		v, _ := readInt(filepath.Join(g.dirs["unified"], "memory.peak"))
		return v
	}
	v, _ := readInt(filepath.Join(g.dirs["memory"], "memory.max_usage_in_bytes"))
	return v
}

func (g *cgroup) procs() []int {
	var out []int
	for _, d := range g.paths() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slicesContains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// exists reports whether any directory of the group is still there.
func (g *cgroup) exists() []string {
	var out []string
	for _, d := range g.paths() {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// destroy kills every process in the group and removes it. It is safe to
// call on a group that is partly or wholly gone.
func (g *cgroup) destroy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		g.killAll()
		var errs []error
		for _, d := range g.paths() {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
		if len(errs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(errs...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *cgroup) killAll() {
	if g.h.v2 {
		d := g.dirs["unified"]
		if err := writeFile(filepath.Join(d, "cgroup.kill"), "1"); err == nil {
			return
		}
		_ = writeFile(filepath.Join(d, "cgroup.freeze"), "1")
		for _, pid := range g.procs() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = writeFile(filepath.Join(d, "cgroup.freeze"), "0")
		return
	}
	pids := g.procs()
	if len(pids) == 0 {
		return
	}
	// Freeze so that nothing can fork while we kill, then thaw so the
	// SIGKILLs are delivered.
	fz := filepath.Join(g.dirs["freezer"], "freezer.state")
	frozen := writeFile(fz, "FROZEN") == nil
	if frozen {
		for i := 0; i < 100; i++ {
			b, err := os.ReadFile(fz)
			if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, pid := range g.procs() {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if frozen {
		_ = writeFile(fz, "THAWED")
	}
}
