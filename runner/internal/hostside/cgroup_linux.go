package hostside

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup reads a container's cgroup files on this host, for what the
// agent does not tell per Exec: OOM kills of processes other than pid 1,
// CPU used by one Exec and a fork loop (Watch). sandboxd must share the host's cgroup namespace
// and /sys/fs/cgroup; otherwise FindCgroup returns nil and Exec reports
// no usage and no OOM kills.
type Cgroup struct {
	initPid int // the agent's host pid
	v2      bool
	memory  string // v1: memory controller dir; v2: the unified dir
	cpu     string // v1: cpuacct dir
	pids    string // v1: pids controller dir; v2: the unified dir; "": none
	// NoStrays disables KillStrays and the fork-loop watch: the cgroup's
	// processes are the runtime's own (gVisor).
	NoStrays bool
}

// Sample is a reading of a cgroup's counters.
type Sample struct {
	OOMKills int64
	CPU      time.Duration
	Peak     int64
	// PIDsMax counts the forks refused by the pids limit (pids.events).
	PIDsMax int64
}

// FindCgroup locates the cgroup of the task whose init has host pid pid.
func FindCgroup(pid int) *Cgroup {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	cg := &Cgroup{initPid: pid}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := strings.Split(parts[1], ","), parts[2]
		for _, c := range ctrls {
			switch c {
			case "memory":
				cg.memory = filepath.Join("/sys/fs/cgroup/memory", path)
			case "cpuacct":
				cg.cpu = filepath.Join("/sys/fs/cgroup", parts[1], path)
			case "pids":
				cg.pids = filepath.Join("/sys/fs/cgroup", parts[1], path)
			}
		}
		if parts[0] == "0" && parts[1] == "" && cg.memory == "" {
			cg.v2, cg.memory = true, filepath.Join("/sys/fs/cgroup", path)
		}
	}
	if cg.memory == "" {
		return nil
	}
	if cg.v2 && cg.cpu != "" { // hybrid: v1 memory wins
		cg.v2 = false
	}
	if cg.v2 {
		cg.pids = cg.memory
	}
	if _, err := os.Stat(cg.memory); err != nil {
		return nil
	}
	return cg
}

// Sample reads the counters; missing files read as zero. Nil-safe.
func (c *Cgroup) Sample() Sample {
	var s Sample
	if c == nil {
		return s
	}
	if c.v2 {
		s.OOMKills = keyed(filepath.Join(c.memory, "memory.events"), "oom_kill")
		s.CPU = time.Duration(keyed(filepath.Join(c.memory, "cpu.stat"), "usage_usec")) * time.Microsecond
		s.Peak = single(filepath.Join(c.memory, "memory.peak"))
		s.PIDsMax = c.pidsMax()
		return s
	}
	s.PIDsMax = c.pidsMax()
	s.OOMKills = keyed(filepath.Join(c.memory, "memory.oom_control"), "oom_kill")
	s.Peak = single(filepath.Join(c.memory, "memory.max_usage_in_bytes"))
	if c.cpu != "" {
		s.CPU = time.Duration(single(filepath.Join(c.cpu, "cpuacct.usage")))
	}
	return s
}

// pidsMax is the pids.events "max" counter, 0 without one.
func (c *Cgroup) pidsMax() int64 {
	if c.pids == "" {
		return 0
	}
	return keyed(filepath.Join(c.pids, "pids.events"), "max")
}

// KillStrays kills the processes of the container that left the agent's
// session (setsid daemons): the agent kills each Exec's process group,
// which they escaped. Call it only while no Exec runs. Nil-safe.
func (c *Cgroup) KillStrays() (killed int) {
	if c == nil || c.NoStrays {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(c.memory, "cgroup.procs"))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid == c.initPid || session(pid) == c.initPid {
			continue
		}
		// The pidfd pins the process: check it is still ours, then kill
		// exactly it (no pid reuse race).
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if s := session(pid); s != 0 && s != c.initPid && c.contains(pid) {
			if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
				killed++
			}
		}
		unix.Close(fd)
	}
	return killed
}

// contains reports whether pid is (still) in the container's memory cgroup.
func (c *Cgroup) contains(pid int) bool {
	b, err := os.ReadFile(filepath.Join(c.memory, "cgroup.procs"))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid))
}

// session returns the session id of a host pid, 0 if it is gone.
func session(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid pgrp session ...; comm may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0
	}
	n, _ := strconv.Atoi(f[3])
	return n
}

func single(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}

func keyed(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
