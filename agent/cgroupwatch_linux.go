package agent

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where the agent watches its own container from inside, for runners
// whose sandboxd cannot read the container's cgroup or kill its
// processes from the host (the Kubernetes runner: ServerOptions.CgroupUsage
// and KillStrays).

// oomFiles hold the memory cgroup's "oom_kill N" counter as a container
// sees its own cgroup: v2, then v1.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomKills is the container's OOM kill count, -1 when no file has one.
func oomKills() int64 { return keyedFirst(oomFiles, "oom_kill") }

// cgroupUsage is the container's CPU time and peak memory so far (v2,
// then v1; 0 where unreadable).
func cgroupUsage() (cpu time.Duration, peak int64) {
	if us := keyedFirst([]string{"/sys/fs/cgroup/cpu.stat"}, "usage_usec"); us >= 0 {
		cpu = time.Duration(us) * time.Microsecond
	} else if ns := singleFirst("/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"); ns > 0 {
		cpu = time.Duration(ns)
	}
	return cpu, max(singleFirst("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"), 0)
}

// singleFirst is the number in the first of files that holds one, -1
// when none does.
func singleFirst(files ...string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// keyedFirst is the value of the "key N" line of the first of files that
// has one, -1 when none does.
func keyedFirst(files []string, key string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// killStrays kills every process of the agent's pid namespace that left
// its session (setsid daemons escape the process group an exec's end
// kills). Call it only while no exec runs: each exec's own processes
// stay in the agent's session.
func killStrays() (killed int) {
	own, err := unix.Getsid(0)
	if err != nil {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		sid, err := unix.Getsid(pid)
		if err != nil || sid == own {
			continue
		}
		// The pidfd pins the process: check its session again, then
		// kill exactly it (no pid reuse race).
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if sid, err := unix.Getsid(pid); err == nil && sid != own {
			if unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0) == nil {
				killed++
			}
		}
		unix.Close(fd)
	}
	return killed
}
