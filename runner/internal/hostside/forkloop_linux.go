package hostside

import (
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

// A fork loop is a process that keeps forking at its sandbox's pids limit:
// a fork bomb, or a loop that retries a refused fork. The limit bounds its
// processes, not its harm to others: a refused fork has already copied the
// process (the pids check comes late in fork), and copying and tearing down
// every file mapping takes the lock of that file's mapping tree. The files
// are shared: libc and python are the same inodes for every sandbox of an
// image and, on the local runner, for the host. Measured here, a host's
// /bin/true waited up to 11 s (in D state in mmap) behind twenty fork loops
// of 100 processes each, and another tenant's print(1) p99 rose from 28 ms
// to 685 ms behind fork bombs with 5 s timeouts.
//
// So a runner watches the pids.events "max" counter of its sandbox's cgroup
// while an Exec runs, and kills the Exec's process group once the limit was
// hit in every poll for ForkLoopAfter: the result says why
// (runner.Result.ForkLoop). A process that meets its limit once and
// handles it (exits, waits for its children) is left alone.
const (
	forkPoll = 50 * time.Millisecond
	// ForkLoopAfter is how long a sandbox may keep hitting its pids limit
	// before its Exec is killed as a fork loop.
	ForkLoopAfter = 250 * time.Millisecond
)

// ExecWatch is what a runner watches of its sandbox's cgroup around one
// Exec: the samples before and after it, and a fork loop. Start it with
// Cgroup.Watch, call End when the Exec returned.
type ExecWatch struct {
	Before, After Sample

	cg    *Cgroup
	stop  chan struct{}
	mu    sync.Mutex
	timer *time.Timer
	last  int64 // pids.events max at the last poll
	hits  int   // polls in a row that saw it rise
	fired bool
	ended bool
}

// Watch samples the cgroup before an Exec of req and watches it for a
// fork loop, which closes req.Stop (the agent then kills the process group
// and answers the result). Nil-safe: without a cgroup, or one without a
// pids controller, or whose processes are a runtime's own (NoStrays:
// gVisor, whose forks never reach the host's pids cgroup), it only samples.
func (c *Cgroup) Watch(req *agent.ExecRequest) *ExecWatch {
	w := &ExecWatch{cg: c, Before: c.Sample()}
	if c == nil || c.pids == "" || c.NoStrays {
		return w
	}
	w.stop, w.last = make(chan struct{}), w.Before.PIDsMax
	req.Stop = w.stop
	w.timer = time.AfterFunc(forkPoll, w.poll)
	return w
}

func (w *ExecWatch) poll() {
	n := w.cg.pidsMax()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	if n > w.last {
		w.hits++
	} else {
		w.hits = 0
	}
	w.last = n
	if time.Duration(w.hits)*forkPoll >= ForkLoopAfter {
		w.fired = true
		close(w.stop)
		return
	}
	w.timer.Reset(forkPoll)
}

// End stops the watch and samples the cgroup after the Exec.
func (w *ExecWatch) End() {
	w.mu.Lock()
	w.ended = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.After = w.cg.Sample()
}

// ForkLoop reports whether the watch killed the Exec as a fork loop.
func (w *ExecWatch) ForkLoop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}
