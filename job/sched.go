package job

import (
	"sync"

	"github.com/sandboxd/sandboxd/config"
)

// scheduler is the order in which queued jobs get a worker: fair across
// tenants, not first come first served. It is the one home of that order
// (a store that claims jobs itself reuses pick).
//
//   - Each tenant has a FIFO of its queued jobs and a cap on the jobs it has
//     running at once (config: tenants[].max_running, else
//     queue.tenant_max_running); a tenant at its cap is skipped, so a
//     tenant's flood leaves workers for the others.
//   - Among the tenants with a job to start and room under their cap, the
//     one with the smallest pass goes first (stride scheduling); each start
//     advances its pass by stride/weight (tenants[].weight, default 100).
//     Two backlogged tenants of weights 200 and 100 start two jobs to one.
//     A tenant that had nothing queued joins at the current virtual time:
//     idling earns no credit, and its first job goes ahead of a busy
//     tenant's backlog.
//   - A tenant whose job was killed for a fork loop has its cap halved (at
//     least 1), and each of its jobs that ends otherwise gives one back, up
//     to the configured cap (additive increase, multiplicative decrease).
//     A storm of refused forks stalls process creation host-wide (README,
//     "Fork loops are killed"); the kill bounds one storm, and the halving
//     bounds how many a tenant that resubmits them at once keeps going
//     (one at a time, while they keep being killed).
//
// It does no admission (Service.slots bounds the queued jobs).
//
// A tenant's state lives as long as the scheduler (tenants are configured,
// so they are few).
type scheduler struct {
	mu      sync.Mutex
	cond    *sync.Cond
	tenants map[string]*tenantQueue
	shares  map[string]config.TenantShare
	defCap  int    // cap of a tenant without its own
	vtime   uint64 // pass of the last started job
	seq     uint64 // push order: ties go to the earliest job
	queued  int
	closed  bool
	wakes   int // returns from cond.Wait (tests)
}

// stride is the pass a start of a weight-1 tenant costs.
const stride = 1 << 32

type tenantQueue struct {
	name    string
	q       []schedItem
	running int
	pass    uint64
	weight  int
	cap     int // configured
	allowed int // the cap in force: cap, halved by each fork-loop kill
}

type schedItem struct {
	e   *entry
	seq uint64
}

// newScheduler: defCap is the running cap of tenants without their own
// (at least 1); shares are the tenants' weights and caps.
func newScheduler(defCap int, shares map[string]config.TenantShare) *scheduler {
	s := &scheduler{tenants: map[string]*tenantQueue{}, shares: shares, defCap: max(defCap, 1)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *scheduler) tenant(name string) *tenantQueue {
	t := s.tenants[name]
	if t == nil {
		sh := s.shares[name]
		t = &tenantQueue{name: name, weight: sh.Weight, cap: sh.MaxRunning}
		if t.weight <= 0 {
			t.weight = config.DefaultTenantWeight
		}
		if t.cap <= 0 {
			t.cap = s.defCap
		}
		t.allowed = t.cap
		s.tenants[name] = t
	}
	return t
}

// push queues e at the end of its tenant's FIFO.
func (s *scheduler) push(e *entry) {
	name := e.tenant()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenant(name)
	if len(t.q) == 0 && t.pass < s.vtime {
		t.pass = s.vtime // no credit for the time it had nothing queued
	}
	s.seq++
	t.q = append(t.q, schedItem{e: e, seq: s.seq})
	s.queued++
	s.cond.Signal() // one more job: one idle worker, not all sixteen (each wake-up was a thread woken per job)
}

// pick is the tenant whose job starts next, nil when every tenant with
// queued jobs is at its cap (or nothing is queued). Called with mu held.
func (s *scheduler) pick() *tenantQueue {
	var best *tenantQueue
	for _, t := range s.tenants {
		if len(t.q) == 0 || t.running >= t.allowed {
			continue
		}
		if best == nil || t.pass < best.pass || (t.pass == best.pass && t.q[0].seq < best.q[0].seq) {
			best = t
		}
	}
	return best
}

// next blocks until a job may start and returns it, counted as running
// for its tenant until done. nil once the scheduler is closed.
func (s *scheduler) next() *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil
		}
		if t := s.pick(); t != nil {
			it := t.q[0]
			t.q[0] = schedItem{}
			t.q = t.q[1:]
			s.queued--
			t.running++
			s.vtime = max(s.vtime, t.pass)
			t.pass += stride / uint64(t.weight)
			return it.e
		}
		s.cond.Wait()
		s.wakes++
	}
}

// done ends a job that next returned: its tenant may start another.
// forkLoop says the job was killed for a fork loop: the tenant's cap in
// force halves, where any other end gives one back.
func (s *scheduler) done(tenant string, forkLoop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[tenant]
	if t == nil || t.running == 0 {
		return
	}
	t.running--
	if forkLoop {
		t.allowed = max(t.allowed/2, 1)
	} else if t.allowed < t.cap {
		t.allowed++
	}
	s.cond.Signal() // one slot: at most one job more may start
}

// allowed is the tenant's cap in force (tests).
func (s *scheduler) allowed(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[tenant]; t != nil {
		return t.allowed
	}
	return 0
}

// close wakes every waiting next (which returns nil); queued jobs stay
// queued in the store and run at the next start.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cond.Broadcast()
}

// running is the tenant's jobs started and not done (tests, metrics).
func (s *scheduler) running(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[tenant]; t != nil {
		return t.running
	}
	return 0
}
