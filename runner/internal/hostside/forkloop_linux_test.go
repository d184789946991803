package hostside

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
)

// fakePids is a cgroup whose pids.events the test writes.
func fakePids(t *testing.T) (*Cgroup, func(n int64)) {
	dir := t.TempDir()
	set := func(n int64) {
		tmp := filepath.Join(dir, "pids.events.tmp")
		if err := os.WriteFile(tmp, []byte("max "+strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "pids.events")); err != nil {
			t.Fatal(err)
		}
	}
	set(7)
	return &Cgroup{memory: dir, pids: dir}, set
}

// TestWatchKillsForkLoop: a limit hit in every poll closes the request's
// Stop within about ForkLoopAfter; the watch says so.
func TestWatchKillsForkLoop(t *testing.T) {
	cg, set := fakePids(t)
	var req agent.ExecRequest
	start := time.Now()
	w := cg.Watch(&req)
	if w.Before.PIDsMax != 7 || req.Stop == nil {
		t.Fatalf("before %+v, stop %v", w.Before, req.Stop)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for n := int64(8); ; n++ {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
				set(n)
			}
		}
	})
	defer close(done)
	select {
	case <-req.Stop:
	case <-time.After(10 * time.Second):
		t.Fatal("a fork loop was not stopped")
	}
	if el := time.Since(start); el < ForkLoopAfter {
		t.Errorf("stopped after %v, before ForkLoopAfter %v", el, ForkLoopAfter)
	}
	w.End()
	if !w.ForkLoop() || w.After.PIDsMax <= 7 {
		t.Fatalf("fork loop %v, after %+v", w.ForkLoop(), w.After)
	}
}

// TestWatchSparesOneHit: a process that meets its limit once, or now and
// then, is not a fork loop; End stops the watch.
func TestWatchSparesOneHit(t *testing.T) {
	cg, set := fakePids(t)
	var req agent.ExecRequest
	w := cg.Watch(&req)
	set(20) // one burst of refused forks
	time.Sleep(3 * ForkLoopAfter)
	set(21) // and one more, much later
	time.Sleep(2 * forkPoll)
	select {
	case <-req.Stop:
		t.Fatal("stopped a process that hit its limit twice")
	default:
	}
	w.End()
	if w.ForkLoop() {
		t.Fatal("reported a fork loop")
	}
	for n := int64(22); n < 40; n++ { // after End nothing watches
		set(n)
		time.Sleep(forkPoll)
	}
	select {
	case <-req.Stop:
		t.Fatal("stopped after End")
	default:
	}
}

// TestWatchWithoutPids: no cgroup, no pids controller, or a runtime's own
// processes (gVisor): samples only, no Stop.
func TestWatchWithoutPids(t *testing.T) {
	for _, cg := range []*Cgroup{nil, {memory: t.TempDir()}, {memory: t.TempDir(), pids: t.TempDir(), NoStrays: true}} {
		var req agent.ExecRequest
		w := cg.Watch(&req)
		w.End()
		if req.Stop != nil || w.ForkLoop() {
			t.Errorf("%+v: stop %v, fork loop %v", cg, req.Stop, w.ForkLoop())
		}
	}
	if res := ExecResult(agent.ExecResult{Killed: true}, agent.ExecRequest{}, runner.Limits{}, nil); res.ForkLoop {
		t.Error("a fork loop without a watch")
	}
}
