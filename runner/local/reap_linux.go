package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Reaping: Create writes StateDir/<id>/owner.json (runner pid and start
// time, cgroup, workspace owner) before creating anything; Reap destroys
// the sandboxes whose owner is dead.

// owner is the ownership record in StateDir/<id>/owner.json.
type owner struct {
	PID        int    `json:"pid"`
	Start      string `json:"start"` // /proc/<pid>/stat start time, guards pid reuse
	Cgroup     string `json:"cgroup"`
	Workspace  string `json:"workspace,omitempty"`
	ChownedUID int    `json:"chowned_uid,omitempty"` // workspace owner to restore
	ChownedGID int    `json:"chowned_gid,omitempty"`
	Chowned    bool   `json:"chowned,omitempty"`
	// Replica is the sandboxd replica that made it (SandboxSpec.Replica).
	Replica string `json:"replica,omitempty"`
}

func writeOwner(dir string, o owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "owner.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "owner.json"))
}

// procStart returns field 22 of /proc/<pid>/stat (start time in ticks), or
// "" when the process does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// Reap destroys sandboxes recorded in StateDir whose owning process is gone
// (a previous sandboxd killed with -9), and any record left by this process
// that no open Sandbox holds: it kills their processes, removes their
// cgroups and state dirs and gives rw workspaces their owner back. It
// returns how many it destroyed. Sandboxes of another live process sharing
// the StateDir are left alone.
//
// It also removes the empty sandbox cgroups under CgroupParent that no
// record names any more: those of a runner whose state dir went with its
// data dir (a test instance killed, then its temp dir removed), which no
// other process would ever reap (reapEmptyCgroups).
func (r *Runner) Reap(ctx context.Context) (int, error) {
	n, err := r.reapDirs(ctx, func(own owner, recorded bool) bool {
		if !recorded {
			return true // a crash between mkdir and the record: nothing else exists
		}
		// Not while another live runner process owns it.
		return own.PID == 0 || own.PID == os.Getpid() || own.Start == "" || procStart(own.PID) != own.Start
	})
	r.reapEmptyCgroups(time.Now().Add(-emptyCgroupAge))
	return n, err
}

// emptyCgroupAge is how long a sandbox cgroup must have been there, empty,
// before reapEmptyCgroups removes it: a sandbox being created (by this or
// another runner process on the host) moves its init into its new cgroup
// within milliseconds.
const emptyCgroupAge = time.Minute

// reapEmptyCgroups removes the sandbox cgroups under CgroupParent (and
// under its tenants' groups) that hold no process, have no child, were
// created before `before` and belong to no sandbox open in this process.
// A group with no process is no live sandbox's: a sandbox's init lives in
// it from its start to its Close. The kernel refuses to remove a group
// that has gained a process meanwhile, so a race only leaves it there.
func (r *Runner) reapEmptyCgroups(before time.Time) int {
	if r.cg == nil {
		return 0
	}
	removed := map[string]bool{}
	var walk func(dir, rel string, depth int)
	walk = func(dir, rel string, depth int) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name := e.Name()
			if depth == 0 && strings.HasPrefix(name, "tenant-") {
				walk(filepath.Join(dir, name), filepath.Join(rel, name), 1)
				continue
			}
			if !hostside.ValidID(name) {
				continue
			}
			r.mu.Lock()
			_, live := r.live[name]
			r.mu.Unlock()
			if live {
				continue
			}
			g := r.cg.group(filepath.Join(rel, name))
			if len(g.procs()) > 0 || !emptyAndOld(g.exists(), before) {
				continue
			}
			gone := true
			for _, d := range g.exists() {
				if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
					gone = false
				}
			}
			if gone {
				removed[g.rel] = true
			}
		}
	}
	for _, d := range r.cg.group(r.cfg.CgroupParent).dirs() {
		walk(d, r.cfg.CgroupParent, 0)
	}
	return len(removed)
}

// emptyAndOld reports whether each cgroup directory has no child group and
// was changed last before `before`.
func emptyAndOld(dirs []string, before time.Time) bool {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.ModTime().Before(before) {
			return false
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return false
		}
		for _, e := range entries {
			if e.IsDir() {
				return false
			}
		}
	}
	return true
}

// ReapReplica implements runner.ReplicaReaper: the sandboxes in StateDir
// whose record names replica, whether their runner process lives or not
// (the replica lost its lease: its cgroup's destruction kills its
// processes), except those open in this process.
func (r *Runner) ReapReplica(ctx context.Context, replica string) (int, error) {
	if replica == "" {
		return 0, nil
	}
	return r.reapDirs(ctx, func(own owner, recorded bool) bool { return recorded && own.Replica == replica })
}

// reapDirs destroys the sandboxes in StateDir that no open Sandbox of this
// process holds and that reap accepts, given their owner record (recorded
// false: none readable, own names only the cgroup).
func (r *Runner) reapDirs(ctx context.Context, reap func(own owner, recorded bool) bool) (int, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if !e.IsDir() || !hostside.ValidID(e.Name()) {
			continue
		}
		r.mu.Lock()
		_, live := r.live[e.Name()]
		r.mu.Unlock()
		if live {
			continue // ours, open (or being created) in this process
		}
		dir := filepath.Join(r.cfg.StateDir, e.Name())
		var own owner
		b, err := os.ReadFile(filepath.Join(dir, "owner.json"))
		if err == nil {
			err = json.Unmarshal(b, &own)
		}
		recorded := err == nil
		if !recorded {
			own = owner{Cgroup: filepath.Join(r.cfg.CgroupParent, e.Name())}
		}
		if !reap(own, recorded) {
			continue
		}
		if err := r.destroy(dir, own); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// destroy removes everything a sandbox record names.
func (r *Runner) destroy(dir string, own owner) error {
	var errs []error
	if r.cg != nil && own.Cgroup != "" {
		if err := r.cg.group(own.Cgroup).destroy(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if own.Chowned && own.Workspace != "" {
		if err := os.Chown(own.Workspace, own.ChownedUID, own.ChownedGID); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("restore workspace owner: %w", err))
		}
	}
	if len(errs) == 0 && dir != "" {
		// Only empty dirs and our own files live here: every mount was
		// made in a helper's private mount namespace.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
