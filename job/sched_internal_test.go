package job

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
)

func schedEntry(tenant string, n int) *entry {
	return &entry{job: &Job{ID: fmt.Sprintf("%s-%d", tenant, n), Tenant: tenant}}
}

// order starts n jobs (each done at once) and returns their IDs.
func order(s *scheduler, n int) string {
	var ids []string
	for range n {
		e := s.next()
		ids = append(ids, e.job.ID)
		s.done(e.job.Tenant, false)
	}
	return strings.Join(ids, " ")
}

// A tenant's backlog does not delay another tenant's job: the quiet
// tenant's job, pushed after twenty of the noisy one's, starts next.
func TestSchedulerQuietTenantGoesNext(t *testing.T) {
	s := newScheduler(16, nil)
	for i := range 20 {
		s.push(schedEntry("noisy", i))
	}
	if got := order(s, 3); got != "noisy-0 noisy-1 noisy-2" {
		t.Fatalf("one tenant alone: FIFO, got %s", got)
	}
	s.push(schedEntry("quiet", 0))
	s.push(schedEntry("quiet", 1))
	// The quiet tenant joins at the current virtual time: it and the
	// noisy one alternate, the quiet one first.
	if got, want := order(s, 5), "quiet-0 noisy-3 quiet-1 noisy-4 noisy-5"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// Weights: two backlogged tenants of weights 200 and 100 start two jobs
// to one.
func TestSchedulerWeights(t *testing.T) {
	s := newScheduler(16, map[string]config.TenantShare{"gold": {Weight: 200}})
	for i := range 30 {
		s.push(schedEntry("gold", i))
		s.push(schedEntry("plain", i))
	}
	n := map[string]int{}
	for range 30 {
		e := s.next()
		n[e.job.Tenant]++
		s.done(e.job.Tenant, false)
	}
	if n["gold"] != 20 || n["plain"] != 10 {
		t.Fatalf("started %v, want gold 20 plain 10", n)
	}
}

// Caps: a tenant at its running cap gets no worker while another tenant
// has a job; once one of its jobs is done, it may start another.
func TestSchedulerCaps(t *testing.T) {
	s := newScheduler(2, map[string]config.TenantShare{"one": {MaxRunning: 1}})
	for i := range 5 {
		s.push(schedEntry("noisy", i))
	}
	s.push(schedEntry("one", 0))
	s.push(schedEntry("one", 1))
	var started []string
	for range 3 { // not done: they keep running
		started = append(started, s.next().job.ID)
	}
	if got := strings.Join(started, " "); got != "noisy-0 one-0 noisy-1" {
		t.Fatalf("started %s", got)
	}
	if s.running("noisy") != 2 || s.running("one") != 1 {
		t.Fatalf("running noisy %d one %d", s.running("noisy"), s.running("one"))
	}
	// Both tenants are at their caps: next waits.
	got := make(chan *entry)
	go func() { got <- s.next() }()
	select {
	case e := <-got:
		t.Fatalf("started %s past the caps", e.job.ID)
	case <-time.After(50 * time.Millisecond):
	}
	s.done("one", false)
	select {
	case e := <-got:
		if e.job.ID != "one-1" {
			t.Fatalf("started %s, want one-1", e.job.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no start after a job of the capped tenant finished")
	}
	// Closing wakes a waiting next with nil.
	go func() { got <- s.next() }()
	time.Sleep(10 * time.Millisecond)
	s.close()
	select {
	case e := <-got:
		if e != nil {
			t.Fatalf("next after close = %s", e.job.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake next")
	}
}

// Idling earns no credit: a tenant that ran nothing for a while does not
// get a burst ahead of the others when it comes back.
func TestSchedulerNoCreditForIdling(t *testing.T) {
	s := newScheduler(16, nil)
	for i := range 10 {
		s.push(schedEntry("a", i))
	}
	order(s, 10)
	s.push(schedEntry("b", 0))
	order(s, 1)
	for i := range 4 {
		s.push(schedEntry("b", i+1))
		s.push(schedEntry("a", i+10))
	}
	if got, want := order(s, 4), "b-1 a-10 b-2 a-11"; got != want { // alternating, not b-1..b-4 first
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestQueueTenantCap(t *testing.T) {
	for _, c := range []struct {
		q       config.Queue
		tenants int
		want    int
	}{
		{config.Queue{Workers: 16}, 1, 16},
		{config.Queue{Workers: 16}, 2, 12},
		{config.Queue{Workers: 1}, 3, 1},
		{config.Queue{Workers: 16, TenantMaxRunning: 4}, 1, 4},
		{config.Queue{Workers: 4, TenantMaxRunning: 40}, 3, 4},
	} {
		if got := c.q.TenantCap(c.tenants); got != c.want {
			t.Errorf("%+v with %d tenants: cap %d, want %d", c.q, c.tenants, got, c.want)
		}
	}
}

// A job pushed while sixteen workers wait wakes one of them, not all:
// each wake-up is a thread woken and put back to sleep, per job.
func TestSchedulerPushWakesOne(t *testing.T) {
	s := newScheduler(16, nil)
	got := make(chan *entry, 16)
	for range 16 {
		go func() {
			for {
				e := s.next()
				if e == nil {
					return
				}
				got <- e
			}
		}()
	}
	waiting := func() bool { // every worker is in cond.Wait
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.wakes == 0
	}
	time.Sleep(50 * time.Millisecond)
	if !waiting() {
		t.Fatal("a worker woke with nothing queued")
	}
	for i := range 3 {
		s.push(schedEntry("a", i))
		<-got
		s.done("a", false)
	}
	time.Sleep(50 * time.Millisecond)
	s.mu.Lock()
	wakes := s.wakes
	s.mu.Unlock()
	s.close()
	if wakes > 6 { // a push wakes one worker, a done at most one more
		t.Fatalf("%d wake-ups for 3 jobs and 16 idle workers", wakes)
	}
}

// A tenant whose jobs are killed for fork loops runs fewer at once: each
// kill halves its cap in force (down to 1, never 0), each other end gives
// one back, up to the configured cap. The other tenants keep theirs.
func TestSchedulerForkLoopHalvesCap(t *testing.T) {
	s := newScheduler(8, nil)
	for i := range 40 {
		s.push(schedEntry("noisy", i))
	}
	s.push(schedEntry("quiet", 0))
	start := func(n int) {
		t.Helper()
		for range n {
			if e := s.next(); e == nil || e.job.Tenant != "noisy" {
				t.Fatalf("started %v, want a noisy job", e)
			}
		}
	}
	if e := s.next(); e.job.Tenant != "noisy" {
		t.Fatalf("first start %s", e.job.ID)
	}
	if e := s.next(); e.job.Tenant != "quiet" { // the quiet tenant's one job goes ahead of the backlog
		t.Fatalf("second start %s", e.job.ID)
	}
	start(7) // noisy at its cap of 8
	for _, want := range []int{4, 2, 1, 1} {
		s.done("noisy", true)
		if got := s.allowed("noisy"); got != want {
			t.Fatalf("after a fork-loop kill: allowed %d, want %d", got, want)
		}
	}
	// 4 noisy jobs still run, over the cap of 1: none starts until they
	// end, and each normal end gives one back.
	got := make(chan *entry)
	go func() { got <- s.next() }()
	select {
	case e := <-got:
		t.Fatalf("started %s past the halved cap", e.job.ID)
	case <-time.After(50 * time.Millisecond):
	}
	for range 3 {
		s.done("noisy", false) // running 3, 2, 1; allowed 2, 3, 4
	}
	if e := <-got; e.job.Tenant != "noisy" {
		t.Fatalf("started %s", e.job.ID)
	}
	if s.allowed("noisy") != 4 || s.running("noisy") != 2 {
		t.Fatalf("allowed %d running %d, want 4 and 2", s.allowed("noisy"), s.running("noisy"))
	}
	start(2)
	for range 20 {
		s.done("noisy", false)
		if s.running("noisy") < 4 {
			start(1)
		}
	}
	if s.allowed("noisy") != 8 {
		t.Fatalf("allowed %d after normal ends, want the configured 8", s.allowed("noisy"))
	}
	s.done("quiet", false)
	if s.allowed("quiet") != 8 {
		t.Fatalf("quiet tenant's cap %d", s.allowed("quiet"))
	}
}
