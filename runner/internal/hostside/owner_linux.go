// Package hostside holds the host side every runner backend shares, so
// that what is the same is written once and what differs stays visibly in
// each backend:
//
//   - the agent model: the agent's command line, capabilities and uid,
//     from package policy, and its state dir closed to the code
//     (agentmodel.go); dialling its socket (agent.go);
//   - Exec through the agent: the request built from a runner.Process, the
//     result with the cgroup's usage and OOM verdict (exec.go), the
//     per-sandbox egress socket (egress.go), the cgroup reading and the
//     killing of strays (cgroup_linux.go), the workspace chown and its
//     restoration (workspace_linux.go);
//   - limits: their check and their completion from the built-in defaults
//     (limits.go); sandbox IDs, the spec's check and the runner config's
//     completion (spec.go);
//   - for the container runners (runner/docker, runner/containerd): the
//     instance with its owner record and labels that tell a dead owner from
//     a live one, the state root shared by instances (statedir.go),
//     reserve, reap, reconcile, Close and a sandbox's Close, the daemon
//     call timeouts and error wrapping (instance.go, owner_linux.go), image
//     names (image.go).
//
// The local runner (runner/local) uses the agent model, Exec, egress and
// cgroup parts.
package hostside

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LabelOwnerProc records the owning process as "pid:starttime" (starttime in
// clock ticks since boot, from /proc/<pid>/stat), so Reap can tell a dead
// owner from a live sandboxd that shares the daemon, whatever the timing.
const LabelOwnerProc = "sandboxd.owner-proc"

// SelfProc is this process's owner-proc value, or "" if /proc is
// unreadable. Read on first use, not at start (see validName).
var SelfProc = sync.OnceValue(func() string { return ProcIdentity(os.Getpid()) })

// ProcIdentity is pid's owner-proc value ("pid:starttime"), "" when pid
// is gone.
func ProcIdentity(pid int) string {
	start, err := procStartTime(pid)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", pid, start)
}

// procStartTime reads field 22 of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// OwnerAlive reports whether the process recorded in an owner-proc label
// still runs; known is false when the label is missing or malformed.
func OwnerAlive(label string) (alive, known bool) {
	pidS, startS, ok := strings.Cut(label, ":")
	if !ok {
		return false, false
	}
	pid, err1 := strconv.Atoi(pidS)
	start, err2 := strconv.ParseUint(startS, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false, false
	}
	now, err := procStartTime(pid)
	return err == nil && now == start && !ProcZombie(pid), true
}

// ProcZombie reports whether pid has exited but not been waited for (its
// parent may never wait: a killed sandboxd's zombie still owns nothing).
func ProcZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// ReapEvery runs reap every interval until ctx ends (not at all when
// interval < 0), logging its failures under what.
func ReapEvery(ctx context.Context, interval time.Duration, reap func(context.Context) error, log *slog.Logger, what string) {
	if interval < 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := reap(ctx); err != nil && ctx.Err() == nil {
				log.Warn(what+": reconcile", "err", err)
			}
		}
	}
}
