package local

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runner"
)

// Cgroups through github.com/containerd/cgroups/v3: cgroup1 with the
// controllers the runner uses, or cgroup2. What an Exec reads (CPU, peak
// memory, OOM kills) is read by runner/internal/hostside from the agent's
// /proc/<pid>/cgroup, as on the container runners.

// v1Controllers are the cgroup v1 controllers a sandbox's group uses.
var v1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu, cgroup1.Cpuacct}

// cgroupHost is the cgroup layout found at New.
type cgroupHost struct {
	v2    bool
	root2 string                  // v2: the unified mount point
	v1    map[cgroup1.Name]string // v1: controller -> its hierarchy's mount point
	memsw bool                    // v1 swap accounting (memory.memsw.*)
}

// detectCgroups reads the mount table. The v1 controllers win when they
// are all mounted (a hybrid host binds them there); otherwise a cgroup2
// mount (the unified /sys/fs/cgroup first) with memory, pids and cpu
// available is used.
func detectCgroups() (*cgroupHost, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	return cgroupLayout(mounts)
}

// parseCgroupMounts is detectCgroups on a mountinfo file's content.
func parseCgroupMounts(r io.Reader) (*cgroupHost, error) {
	mounts, err := mountinfo.GetMountsFromReader(r, mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	return cgroupLayout(mounts)
}

func cgroupLayout(mounts []*mountinfo.Info) (*cgroupHost, error) {
	h := &cgroupHost{v1: map[cgroup1.Name]string{}}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if h.root2 == "" || m.Mountpoint == "/sys/fs/cgroup" {
				h.root2 = m.Mountpoint
			}
		case "cgroup":
			for _, o := range strings.Split(m.VFSOptions, ",") {
				if c := cgroup1.Name(o); slices.Contains(v1Controllers, c) && h.v1[c] == "" {
					h.v1[c] = m.Mountpoint
				}
			}
		}
	}
	var missing []string
	for _, c := range v1Controllers {
		if h.v1[c] == "" {
			missing = append(missing, string(c))
		}
	}
	if len(missing) == 0 {
		_, err := os.Stat(filepath.Join(h.v1[cgroup1.Memory], "memory.memsw.limit_in_bytes"))
		h.memsw = err == nil
		return h, nil
	}
	if h.root2 != "" {
		ctrl, _ := os.ReadFile(filepath.Join(h.root2, "cgroup.controllers"))
		have := strings.Fields(string(ctrl))
		if slices.Contains(have, "memory") && slices.Contains(have, "pids") && slices.Contains(have, "cpu") {
			h.v2, h.v1 = true, nil
			return h, nil
		}
	}
	return nil, fmt.Errorf("cgroup v1 controllers %s not mounted and no cgroup v2 with memory, pids and cpu", strings.Join(missing, ", "))
}

// hierarchy is cgroup1's view of the v1 controllers: each subsystem
// rooted at its hierarchy's parent directory (cgroup1 appends the
// controller's name, which must then lead to its mount point).
func (h *cgroupHost) hierarchy() ([]cgroup1.Subsystem, error) {
	root := func(c cgroup1.Name) (string, error) {
		mp := h.v1[c]
		dir := filepath.Dir(mp)
		if got, err := filepath.EvalSymlinks(filepath.Join(dir, string(c))); err != nil || got != mp {
			return "", fmt.Errorf("cgroup v1 controller %s is mounted at %s, not reachable as %s", c, mp, filepath.Join(dir, string(c)))
		}
		return dir, nil
	}
	var subs []cgroup1.Subsystem
	for _, c := range v1Controllers {
		r, err := root(c)
		if err != nil {
			return nil, err
		}
		switch c {
		case cgroup1.Memory:
			subs = append(subs, cgroup1.NewMemory(r, cgroup1.OptionalSwap()))
		case cgroup1.Pids:
			subs = append(subs, cgroup1.NewPids(r))
		case cgroup1.Cpu:
			subs = append(subs, cgroup1.NewCpu(r))
		case cgroup1.Cpuacct:
			subs = append(subs, cgroup1.NewCpuacct(r))
		}
	}
	return subs, nil
}

// cgroup is one sandbox's group, parent/id under every controller (v1)
// or in the unified hierarchy (v2).
type cgroup struct {
	h   *cgroupHost
	rel string
}

func (h *cgroupHost) group(rel string) *cgroup { return &cgroup{h: h, rel: rel} }

// dirs lists the group's directories, one per hierarchy.
func (g *cgroup) dirs() []string {
	if g.h.v2 {
		return []string{filepath.Join(g.h.root2, g.rel)}
	}
	var out []string
	for _, c := range v1Controllers {
		if d := filepath.Join(g.h.v1[c], g.rel); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// create makes the group with the limits: memory (and memory+swap, or no
// swap), pids and CPU bandwidth.
func (g *cgroup) create(l runner.Limits) error {
	mem, pids := l.MemoryBytes, l.PIDs
	period, quota := uint64(100_000), max(l.CPUMillis*100, 1000)
	if g.h.v2 {
		_, err := cgroup2.NewManager(g.h.root2, "/"+g.rel, &cgroup2.Resources{
			Memory: &cgroup2.Memory{Max: &mem},
			Pids:   &cgroup2.Pids{Max: pids},
			CPU:    &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)},
		})
		if err != nil {
			return fmt.Errorf("create cgroup %s: %w", g.rel, err)
		}
		// No swap (the file is absent on a kernel without swap accounting).
		_ = os.WriteFile(filepath.Join(g.h.root2, g.rel, "memory.swap.max"), []byte("0"), 0)
		return nil
	}
	memory := &specs.LinuxMemory{Limit: &mem}
	if g.h.memsw {
		memory.Swap = &mem
	} else {
		// Without swap accounting, keep the group out of swap as far as
		// v1 allows.
		var zero uint64
		memory.Swappiness = &zero
	}
	_, err := cgroup1.New(cgroup1.StaticPath("/"+g.rel), &specs.LinuxResources{
		Memory: memory,
		Pids:   &specs.LinuxPids{Limit: &pids},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
	}, cgroup1.WithHierarchy(g.h.hierarchy))
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", g.rel, err)
	}
	return nil
}

// add moves pid into the group.
func (g *cgroup) add(pid int) error {
	if g.h.v2 {
		m, err := cgroup2.Load("/"+g.rel, cgroup2.WithMountpoint(g.h.root2))
		if err == nil {
			err = m.AddProc(uint64(pid))
		}
		return err
	}
	c, err := cgroup1.Load(cgroup1.StaticPath("/"+g.rel), cgroup1.WithHierarchy(g.h.hierarchy))
	if err == nil {
		err = c.AddProc(uint64(pid))
	}
	return err
}

// procs lists the processes in the group (every hierarchy).
func (g *cgroup) procs() []int {
	var out []int
	for _, d := range g.dirs() {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// exists lists the group's directories still there.
func (g *cgroup) exists() []string {
	var out []string
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// destroy kills every process in the group and removes it; safe on a
// group partly or wholly gone. The sandbox's processes all live in its pid
// namespace, which dies with its init: nothing can fork faster than the
// kills (the pids limit bounds it anyway).
func (g *cgroup) destroy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var err error
		if g.h.v2 {
			err = g.destroyV2()
		} else {
			err = g.destroyV1()
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *cgroup) destroyV2() error {
	m, err := cgroup2.Load("/"+g.rel, cgroup2.WithMountpoint(g.h.root2))
	if err != nil {
		return err
	}
	if len(g.exists()) == 0 {
		return nil
	}
	if err := m.Kill(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := m.Delete(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (g *cgroup) destroyV1() error {
	for _, pid := range g.procs() {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	c, err := cgroup1.Load(cgroup1.StaticPath("/"+g.rel), cgroup1.WithHierarchy(g.h.hierarchy))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.Delete()
}
