package job

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backoff of a removal that failed: the first retry after cleanupMin,
// doubling up to cleanupMax.
const (
	cleanupMin = time.Second
	cleanupMax = 5 * time.Minute
)

// cleanups is the list of what could not be removed (a workspace file
// made immutable from the host, a busy mount): each path is retried with
// backoff until it goes, and the list's length and size are in /metrics
// (sandboxd_cleanup_pending, sandboxd_cleanup_pending_bytes). It lives in
// memory: after a restart the start-up sweep finds what is left and lists
// it again. Safe for concurrent use.
type cleanups struct {
	log      *slog.Logger
	min, max time.Duration

	mu      sync.Mutex
	pending map[string]*pendingCleanup
	wake    chan struct{} // a new entry: the loop recomputes its timer
}

type pendingCleanup struct {
	attempts int
	next     time.Time
	wait     time.Duration
	bytes    int64
}

func newCleanups(log *slog.Logger) *cleanups {
	return &cleanups{log: log, min: cleanupMin, max: cleanupMax, pending: map[string]*pendingCleanup{}, wake: make(chan struct{}, 1)}
}

// remove removes path and everything below it; on failure it keeps path
// on the list (retried in the background) and returns the error.
func (c *cleanups) remove(path string) error {
	err := os.RemoveAll(path)
	if err == nil {
		c.mu.Lock()
		delete(c.pending, path) // removed by someone else's call
		c.mu.Unlock()
		return nil
	}
	c.mu.Lock()
	p, ok := c.pending[path]
	if !ok {
		p = &pendingCleanup{wait: c.min}
		c.pending[path] = p
	}
	p.attempts++
	p.next = time.Now().Add(p.wait)
	p.wait = min(2*p.wait, c.max)
	p.bytes = treeBytes(path)
	attempts, wait := p.attempts, time.Until(p.next)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.log.Warn("cleanup failed; retrying in the background", "path", path, "attempts", attempts, "retry_in", wait.Round(time.Millisecond), "err", err)
	return err
}

// run retries due entries until quit is closed.
func (c *cleanups) run(quit <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(c.untilNext())
		select {
		case <-quit:
			return
		case <-c.wake:
		case <-t.C:
			for _, path := range c.due() {
				if c.remove(path) == nil {
					c.log.Info("cleanup done after a retry", "path", path)
				}
			}
		}
	}
}

// untilNext is the time until the earliest retry (an hour with none).
func (c *cleanups) untilNext() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := time.Hour
	for _, p := range c.pending {
		d = min(d, time.Until(p.next))
	}
	return max(d, 0)
}

// due lists the paths whose retry time has come.
func (c *cleanups) due() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var paths []string
	now := time.Now()
	for path, p := range c.pending {
		if !p.next.After(now) {
			paths = append(paths, path)
		}
	}
	sort.Strings(paths)
	return paths
}

// stats is the list's length and size.
func (c *cleanups) stats() (n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pending {
		bytes += p.bytes
	}
	return len(c.pending), bytes
}

// register exports the list's length and size.
func (c *cleanups) register(reg prometheus.Registerer) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandboxd_cleanup_pending",
			Help: "Workspaces that could not be removed (retried with backoff until they go).",
		}, func() float64 { n, _ := c.stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandboxd_cleanup_pending_bytes",
			Help: "Bytes of the files in the workspaces that could not be removed.",
		}, func() float64 { _, b := c.stats(); return float64(b) }),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// treeBytes is the size of the regular files at and below path.
func treeBytes(path string) int64 {
	var n int64
	filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// sweepWorkspaces removes every workspace in WorkDir that no live job or
// session of this process owns, at Start: those of jobs lost in a crash or
// killed between their result and their cleanup, of sessions lost, of
// pooled sandboxes of the previous process (reaped by then), and archive
// spools. What cannot be removed goes on the cleanup list. It returns how
// many it removed.
func (s *Service) sweepWorkspaces() int {
	live := map[string]bool{}
	s.smu.Lock()
	for id := range s.sessions {
		live[filepath.Join("sessions", id)] = true
	}
	s.smu.Unlock()
	s.emu.Lock()
	for id := range s.entries {
		live[id] = true
	}
	s.emu.Unlock()
	var stale []string
	for _, sub := range []string{"", "pool", "sessions"} {
		ents, err := os.ReadDir(filepath.Join(s.cfg.WorkDir, sub))
		if err != nil {
			continue
		}
		for _, e := range ents {
			rel := filepath.Join(sub, e.Name())
			// A live workspace's read-only view (workspace.Workspace.View)
			// is live with it; the workspace Manager's own directory
			// (.images) is not a workspace. Mounts of a previous process
			// are gone by now (Workspaces.Cleanup ran first).
			if live[rel] || live[strings.TrimSuffix(rel, ".ro")] || (sub == "" && (e.Name() == "pool" || e.Name() == "sessions" || strings.HasPrefix(e.Name(), "."))) {
				continue
			}
			if e.IsDir() || strings.HasPrefix(e.Name(), "archive-") {
				stale = append(stale, filepath.Join(s.cfg.WorkDir, rel))
			}
		}
	}
	n := 0
	for _, dir := range stale {
		if s.cleanup.remove(dir) == nil {
			n++
		}
	}
	return n
}

// removeWorkspace removes a workspace (or spool) dir; a failure is logged
// and retried (cleanups).
func (s *Service) removeWorkspace(dir string) {
	_ = s.cleanup.remove(dir)
}
