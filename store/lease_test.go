package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store/pgtest"
	"github.com/sandboxd/sandboxd/store/storetest"
)

func openPG(t *testing.T, url string) *Postgres {
	t.Helper()
	s, err := OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestLeaseRenewExpire(t *testing.T) {
	t.Parallel()
	s := openPG(t, pgtest.Shared(t).NewDatabase(t))
	ctx := t.Context()
	l, err := s.Join(ctx, "r1", "10.0.0.1:7000", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch != 1 || l.Address != "10.0.0.1:7000" {
		t.Fatalf("Join = %+v", l)
	}
	if err := s.Renew(ctx, &l, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	live, err := s.Replicas(ctx)
	if err != nil || len(live) != 1 || live[0].Replica != "r1" {
		t.Fatalf("Replicas = %+v, %v", live, err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := s.Renew(ctx, &l, time.Second); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew after expiry: %v, want ErrLeaseLost", err)
	}
	if live, _ := s.Replicas(ctx); len(live) != 0 {
		t.Fatalf("expired replica listed live: %+v", live)
	}
	// A restarted r1 joins with a new epoch; the old lease stays lost.
	l2, err := s.Join(ctx, "r1", "10.0.0.1:7000", time.Minute)
	if err != nil || l2.Epoch != 2 {
		t.Fatalf("rejoin: %+v %v", l2, err)
	}
	if err := s.Renew(ctx, &l, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew of the superseded epoch: %v", err)
	}
}

// Three replicas, two claimers each, claim 300 queued jobs in batches:
// each job is claimed exactly once, and the store says who holds it.
func TestClaimOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := t.Context()
	var stores []*Postgres
	var leases []Lease
	for i := range 3 {
		s := openPG(t, url)
		l, err := s.Join(ctx, fmt.Sprintf("r%d", i), "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		stores, leases = append(stores, s), append(leases, l)
	}
	const n = 300
	for i := range n {
		if err := stores[0].Create(ctx, storetest.NewJob(fmt.Sprintf("j%03d", i), "acme", base.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	claimedBy := map[string]string{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, l := stores[i%3], leases[i%3]
			for {
				jobs, err := claimJobs(ctx, s, l, 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					if prev, dup := claimedBy[j.ID]; dup {
						t.Errorf("job %s claimed by %s and %s", j.ID, prev, l.Replica)
					}
					claimedBy[j.ID] = l.Replica
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(claimedBy) != n {
		t.Fatalf("%d jobs claimed, want %d", len(claimedBy), n)
	}
	var owners int
	if err := stores[0].pool.QueryRow(ctx, `SELECT COUNT(DISTINCT owner) FROM jobs WHERE owner != ''`).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners < 2 {
		t.Logf("only %d replica claimed (the machine is small; the test still holds)", owners)
	}
	for id, r := range claimedBy {
		var owner string
		if err := stores[0].pool.QueryRow(ctx, `SELECT owner FROM jobs WHERE id = $1`, id).Scan(&owner); err != nil || owner != r {
			t.Fatalf("job %s owner %q, claimed by %s (%v)", id, owner, r, err)
		}
	}
}

// A replica whose lease expired is taken over: its running job is lost,
// its claimed job is free again, its session closes as lost; its late
// writes are fenced and change nothing.
func TestTakeoverAndFencing(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := t.Context()
	a, b := openPG(t, url), openPG(t, url)
	la, err := a.Join(ctx, "a", "", 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Join(ctx, "b", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run", "wait"} {
		if err := a.Create(ctx, storetest.NewJob(id, "acme", base)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := claimJobs(ctx, a, la, 10)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	run := claimed[0]
	started := time.Now().UTC()
	run.State, run.StartedAt, run.Attempts = job.StateRunning, &started, 1
	if err := a.UpdateFenced(ctx, la, run); err != nil {
		t.Fatal(err)
	}
	// b may not write a's job.
	if err := b.UpdateFenced(ctx, lb, run); !errors.Is(err, ErrFenced) {
		t.Fatalf("b writes a's job: %v, want ErrFenced", err)
	}
	ss := newSessionPG("ses", base)
	if err := a.CreateSession(ctx, ss); err != nil {
		t.Fatal(err)
	}
	if err := a.SetSessionOwner(ctx, la, "ses"); err != nil {
		t.Fatal(err)
	}

	// A finished job whose callback a was still delivering, and one
	// whose callback was delivered.
	for id, st := range map[string]string{"cb": job.CallbackPending, "cbdone": job.CallbackDelivered} {
		j := storetest.NewJob(id, "acme", base)
		fin := time.Now().UTC()
		j.State, j.FinishedAt = job.StateSucceeded, &fin
		j.Callback = &job.Callback{URL: "http://127.0.0.1:9/cb", State: st}
		if err := a.CreateOwned(ctx, la, j); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing to take over while a is live.
	if tos, err := b.TakeOver(ctx, lb, job.Rerun{}); err != nil || len(tos) != 0 {
		t.Fatalf("takeover of a live replica: %+v %v", tos, err)
	}
	time.Sleep(800 * time.Millisecond) // a "pauses": its lease expires
	var wg sync.WaitGroup
	var tos []Takeover
	var mu sync.Mutex
	for range 3 { // several takers at once: a is taken over once
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.TakeOver(ctx, lb, job.Rerun{})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			tos = append(tos, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(tos) != 1 || tos[0].Dead.Replica != "a" || len(tos[0].Lost) != 1 || tos[0].Lost[0].ID != run.ID ||
		len(tos[0].Requeued) != 1 || len(tos[0].Sessions) != 1 || len(tos[0].Callbacks) != 1 || tos[0].Callbacks[0].ID != "cb" {
		t.Fatalf("takeovers = %+v", tos)
	}
	// The callback is b's to deliver now: b records its attempts.
	cb := tos[0].Callbacks[0]
	cb.Callback.State = job.CallbackDelivered
	if err := b.UpdateFenced(ctx, lb, cb); err != nil {
		t.Fatalf("b records the callback it took over: %v", err)
	}
	got, err := b.Get(ctx, run.ID)
	if err != nil || got.State != job.StateFailed || got.Reason != job.ReasonLost || got.FinishedAt == nil {
		t.Fatalf("a's running job after the takeover: %+v %v", got, err)
	}
	gs, err := b.GetSession(ctx, "ses")
	if err != nil || gs.State != job.SessionClosed || gs.Reason != "lost" || gs.ClosedAt == nil {
		t.Fatalf("a's session after the takeover: %+v %v", gs, err)
	}

	// a wakes up and writes its result: fenced, nothing changes.
	fin := time.Now().UTC()
	run.State, run.FinishedAt = job.StateSucceeded, &fin
	if err := a.UpdateFenced(ctx, la, run); !errors.Is(err, ErrFenced) && !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("late write of the taken-over replica: %v, want ErrFenced or ErrLeaseLost", err)
	}
	if got, _ := b.Get(ctx, run.ID); got.State != job.StateFailed {
		t.Fatalf("a late write changed the job: %+v", got)
	}
	if err := a.Renew(ctx, &la, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a renews after the takeover: %v, want ErrLeaseLost", err)
	}
	if _, err := claimJobs(ctx, a, la, 10); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a claims after the takeover: %v, want ErrLeaseLost", err)
	}
	// a's claimed, unstarted job is b's to claim now.
	again, err := claimJobs(ctx, b, lb, 10)
	if err != nil || len(again) != 1 || again[0].ID != tos[0].Requeued[0].ID {
		t.Fatalf("b claims the released job: %+v %v", again, err)
	}
}

// TestTakeoverReruns: the running jobs of a dead replica that asked for
// retries, of a retry-safe tool (Rerun.Tools) with attempts left, are
// queued again for any replica instead of ending lost; the others end
// lost as before.
func TestTakeoverReruns(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := t.Context()
	a, b := openPG(t, url), openPG(t, url)
	la, err := a.Join(ctx, "a", "", 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Join(ctx, "b", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type spec struct {
		tool     string
		retry    bool
		attempts int
	}
	specs := map[string]spec{
		"safe":    {"calc", true, 1},
		"noretry": {"calc", false, 1},
		"unsafe":  {"sh", true, 1},
		"spent":   {"calc", true, 3},
	}
	for id, sp := range specs {
		j := storetest.NewJob(id, "acme", base)
		j.Tool, j.Retry = sp.tool, sp.retry
		if err := a.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := claimJobs(ctx, a, la, 10)
	if err != nil || len(claimed) != len(specs) {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	for _, j := range claimed {
		started := time.Now().UTC()
		j.State, j.StartedAt, j.Attempts = job.StateRunning, &started, specs[j.ID].attempts
		if err := a.UpdateFenced(ctx, la, j); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(600 * time.Millisecond) // a dies: its lease expires
	tos, err := b.TakeOver(ctx, lb, job.Rerun{Tools: []string{"calc"}, MaxStarted: 2})
	if err != nil || len(tos) != 1 {
		t.Fatalf("takeover: %+v %v", tos, err)
	}
	to := tos[0]
	if len(to.Requeued) != 1 || to.Requeued[0].ID != "safe" || to.Requeued[0].State != job.StateQueued ||
		to.Requeued[0].StartedAt != nil || to.Requeued[0].Attempts != 1 || !to.Requeued[0].Retry {
		t.Fatalf("requeued = %+v, want the retry-safe job queued again", to.Requeued)
	}
	var lost []string
	for _, j := range to.Lost {
		lost = append(lost, j.ID)
	}
	slices.Sort(lost)
	if want := []string{"noretry", "spent", "unsafe"}; !slices.Equal(lost, want) {
		t.Fatalf("lost = %v, want %v", lost, want)
	}
	again, err := claimJobs(ctx, b, lb, 10)
	if err != nil || len(again) != 1 || again[0].ID != "safe" {
		t.Fatalf("b claims the job to run again: %+v %v", again, err)
	}
}

func newSessionPG(id string, created time.Time) *job.Session {
	return &job.Session{ID: id, Tenant: "acme", State: job.SessionActive, TTL: time.Hour,
		CreatedAt: created, ExpiresAt: created.Add(time.Hour), LastUsedAt: created}
}

// A job announced on one handle wakes a replica listening on another.
func TestNotifyQueued(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	a, b := openPG(t, url), openPG(t, url)
	wake, ready := make(chan struct{}, 1), make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- a.WaitQueued(t.Context(), wake, ready) }()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("LISTEN not ready")
	}
	select {
	case <-wake:
		t.Fatal("woken before any notification")
	default:
	}
	if err := b.NotifyQueued(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by NOTIFY")
	}
}

// claimJobs is Claim in plain order, its jobs only.
func claimJobs(ctx context.Context, s *Postgres, l Lease, n int) ([]*job.Job, error) {
	cs, err := s.Claim(ctx, l, n, job.ClaimOrder{})
	var out []*job.Job
	for _, c := range cs {
		out = append(out, c.Job)
	}
	return out, err
}

// Claims are fair across tenants: a tenant's backlog does not go first
// because it is older; weights count (2:1), and jobs a tenant already has
// claimed count against it. Enqueue refuses past the global capacity.
func TestClaimFairOrder(t *testing.T) {
	t.Parallel()
	s := openPG(t, pgtest.Shared(t).NewDatabase(t))
	ctx := t.Context()
	l, err := s.Join(ctx, "r1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // flood's backlog, older than everyone's
		if _, err := s.Enqueue(ctx, storetest.NewJob(fmt.Sprintf("f%d", i), "flood", base.Add(time.Duration(i)*time.Millisecond)), 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := s.Enqueue(ctx, storetest.NewJob(fmt.Sprintf("h%d", i), "heavy", base.Add(time.Second+time.Duration(i)*time.Millisecond)), 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	order := job.ClaimOrder{Weights: map[string]int{"heavy": 200}}
	var got []string
	for range 6 {
		cs, err := s.Claim(ctx, l, 1, order)
		if err != nil || len(cs) != 1 {
			t.Fatalf("claim: %+v %v", cs, err)
		}
		got = append(got, cs[0].Job.ID)
	}
	// heavy (weight 200) ranks (claimed+1)/200, flood (claimed+1)/100,
	// a tie to the older job: h0 (.005), f0 (.01 = .01, older), h1 (.01),
	// h2 (.015 < .02), then flood's.
	want := []string{"h0", "f0", "h1", "h2", "f1", "f2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim order %v, want %v", got, want)
	}
	// 3 still queued (f3..f5): a capacity of 3 is full.
	if _, err := s.Enqueue(ctx, storetest.NewJob("x", "other", base), 3, nil); !errors.Is(err, job.ErrQueueFull) {
		t.Fatalf("Enqueue past the capacity: %v, want ErrQueueFull", err)
	}
}

// TestEnqueueSelfClaim: a job enqueued by a replica with a worker free is
// recorded claimed by it only when the fair order would give it that job
// at once: no job waits unclaimed and the tenant's cap has room. Otherwise
// it is queued for any replica, and announced.
func TestEnqueueSelfClaim(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	s, other := openPG(t, url), openPG(t, url)
	ctx := t.Context()
	l, err := s.Join(ctx, "r1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wake, ready := make(chan struct{}, 1), make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go other.WaitQueued(lctx, wake, ready)
	<-ready
	announced := func() bool {
		select {
		case <-wake:
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	}
	enqueue := func(id, tenant string, self *job.SelfClaim) bool {
		t.Helper()
		claimed, err := s.Enqueue(ctx, storetest.NewJob(id, tenant, time.Now().UTC()), 100, self)
		if err != nil {
			t.Fatal(err)
		}
		return claimed
	}
	owner := func(id string) string {
		t.Helper()
		o, err := s.JobOwner(ctx, id)
		if errors.Is(err, job.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return o.Replica
	}
	self := &job.SelfClaim{Lease: l, Cap: 2}
	if !enqueue("a1", "acme", self) || owner("a1") != "r1" || announced() {
		t.Fatal("a job nothing waits before: want it claimed by its replica, not announced")
	}
	if !enqueue("a2", "acme", self) || owner("a2") != "r1" {
		t.Fatal("second job within the cap: want it claimed")
	}
	if enqueue("a3", "acme", self) || owner("a3") != "" || !announced() {
		t.Fatal("past the tenant's cap: want it queued for any replica and announced")
	}
	if enqueue("b1", "beta", self) || owner("b1") != "" || !announced() {
		t.Fatal("a3 waits unclaimed: a later job must not overtake it")
	}
	if enqueue("n1", "beta", nil) || owner("n1") != "" || !announced() {
		t.Fatal("without self: want it queued for any replica")
	}
	// A lost lease claims nothing.
	if _, err := s.Claim(ctx, l, 10, job.ClaimOrder{}); err != nil { // empty the queue
		t.Fatal(err)
	}
	dead := &job.SelfClaim{Lease: job.Lease{Replica: "r1", Epoch: l.Epoch + 1}}
	if enqueue("d1", "delta", dead) || owner("d1") != "" {
		t.Fatal("a lease not live: want the job queued for any replica")
	}
}

// A pending job queued by its approval becomes the deciding replica's
// (it runs there, never claimed elsewhere); a queued job of no replica
// may not be made running by a fenced write (only a claim takes it).
func TestFencedTakesOwner(t *testing.T) {
	t.Parallel()
	s := openPG(t, pgtest.Shared(t).NewDatabase(t))
	ctx := t.Context()
	l, err := s.Join(ctx, "r1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := storetest.NewJob("pend", "acme", base)
	p.State = job.StatePendingApproval
	q := storetest.NewJob("free", "acme", base)
	for _, j := range []*job.Job{p, q} {
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	p.State = job.StateQueued
	if err := s.UpdateFenced(ctx, l, p); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	q.State, q.StartedAt = job.StateRunning, &now
	if err := s.UpdateFenced(ctx, l, q); !errors.Is(err, ErrFenced) {
		t.Fatalf("running an unclaimed job: %v, want ErrFenced", err)
	}
	cs, err := s.Claim(ctx, l, 10, job.ClaimOrder{})
	if err != nil || len(cs) != 1 || cs[0].Job.ID != "free" {
		t.Fatalf("claim: %+v %v, want only the free job (the approved one is r1's already)", cs, err)
	}
	p.State, p.StartedAt = job.StateRunning, &now
	if err := s.UpdateFenced(ctx, l, p); err != nil {
		t.Fatalf("the approved job made running by its owner: %v", err)
	}
}

// A session's job and a pending job are created owned (CreateOwned):
// JobOwner names their replica (a session's unowned job its session's),
// a lost lease creates nothing, and when the owner dies they end lost
// (they can run nowhere else) and the pending job's approval expires.
func TestCreateOwnedJobOwner(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := t.Context()
	a, b := openPG(t, url), openPG(t, url)
	la, err := a.Join(ctx, "a", "10.0.0.1:1", 700*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Join(ctx, "b", "10.0.0.2:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CreateSessionOwned(ctx, la, newSessionPG("ses", base)); err != nil {
		t.Fatal(err)
	}
	sj := storetest.NewJob("sj", "acme", base)
	sj.SessionID = "ses"
	pj := storetest.NewJob("pj", "acme", base)
	pj.State = job.StatePendingApproval
	for _, j := range []*job.Job{sj, pj} {
		if err := a.CreateOwned(ctx, la, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.CreateApproval(ctx, &job.Approval{ID: "apr", Tenant: "acme", JobID: "pj", Tool: "t",
		State: job.ApprovalPending, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	free := storetest.NewJob("free", "acme", base)
	free.SessionID = "ses"
	if err := a.Create(ctx, free); err != nil { // unowned: its session's owner
		t.Fatal(err)
	}
	for _, id := range []string{"sj", "pj", "free"} {
		if l, err := b.JobOwner(ctx, id); err != nil || l.Replica != "a" || l.Address != "10.0.0.1:1" {
			t.Fatalf("JobOwner(%s) = %+v %v, want a", id, l, err)
		}
	}
	if err := b.Create(ctx, storetest.NewJob("oneshot", "acme", base)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JobOwner(ctx, "oneshot"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("JobOwner of an unclaimed job: %v, want ErrNotFound", err)
	}
	spent := storetest.NewJob("spent", "acme", base) // inserted with its guard spend: unowned
	spent.State = job.StatePendingApproval
	if err := a.Create(ctx, spent); err != nil {
		t.Fatal(err)
	}
	if err := a.SetJobOwner(ctx, la, "spent"); err != nil {
		t.Fatal(err)
	}
	if l, err := b.JobOwner(ctx, "spent"); err != nil || l.Replica != "a" {
		t.Fatalf("JobOwner after SetJobOwner: %+v %v", l, err)
	}
	if err := b.SetJobOwner(ctx, lb, "spent"); !errors.Is(err, ErrFenced) {
		t.Fatalf("SetJobOwner of another replica's job: %v, want ErrFenced", err)
	}
	if cs, err := b.Claim(ctx, lb, 10, job.ClaimOrder{}); err != nil || len(cs) != 1 || cs[0].Job.ID != "oneshot" {
		t.Fatalf("claim: %+v %v, want only the one-shot job", cs, err)
	}
	time.Sleep(900 * time.Millisecond) // a's lease expires
	if _, err := b.JobOwner(ctx, "sj"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("JobOwner with the owner's lease expired: %v, want ErrNotFound", err)
	}
	if err := a.CreateOwned(ctx, la, storetest.NewJob("late", "acme", base)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("CreateOwned with a lost lease: %v, want ErrLeaseLost", err)
	}
	if _, err := b.Get(ctx, "late"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("a lost lease's create was recorded: %v", err)
	}
	tos, err := b.TakeOver(ctx, lb, job.Rerun{})
	if err != nil || len(tos) != 1 || len(tos[0].Lost) != 3 || len(tos[0].Requeued) != 0 {
		t.Fatalf("takeover = %+v %v, want the session's and the pending job lost", tos, err)
	}
	for _, id := range []string{"sj", "pj"} {
		if j, err := b.Get(ctx, id); err != nil || j.State != job.StateFailed || j.Reason != job.ReasonLost {
			t.Fatalf("%s after the takeover: %+v %v", id, j, err)
		}
	}
	if ap, err := b.GetApproval(ctx, "apr"); err != nil || ap.State != job.ApprovalExpired {
		t.Fatalf("the pending job's approval: %+v %v, want expired", ap, err)
	}
}

// A tenant's running cap holds across replicas: six claimers on three
// replicas' pools, woken together, take at most the cap of its jobs
// between them (claims are serialised; each sees the others' claims).
func TestClaimCapAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := t.Context()
	var stores []*Postgres
	var leases []Lease
	for i := range 3 {
		s := openPG(t, url)
		l, err := s.Join(ctx, fmt.Sprintf("r%d", i), "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		stores, leases = append(stores, s), append(leases, l)
	}
	for i := range 50 {
		if err := stores[0].Create(ctx, storetest.NewJob(fmt.Sprintf("j%03d", i), "acme", base.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	order := job.ClaimOrder{Caps: map[string]int{"acme": 3}}
	for round := range 20 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		claimed := 0
		for i := range 6 {
			wg.Go(func() {
				<-start
				cs, err := stores[i%3].Claim(ctx, leases[i%3], 3, order)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				claimed += len(cs)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if claimed != 3 {
			t.Fatalf("round %d: %d jobs claimed with a cap of 3, want 3", round, claimed)
		}
		if _, err := stores[0].pool.Exec(ctx, `UPDATE jobs SET owner = '', owner_epoch = 0`); err != nil {
			t.Fatal(err)
		}
	}
}
