package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/store/pgtest"
)

// 200 inserts through three stores (three replicas' pools) race for the
// last 10 units of a budget: exactly 10 jobs are written, the refused
// ones write nothing, and a refund gives a unit back.
func TestCreateSpendingRacers(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	stores := []*Postgres{openPG(t, url), openPG(t, url), openPG(t, url)}
	start := time.Unix(0, 0).UTC()
	sp := policy.Spend{Tenant: "acme", Key: "effect:exec", Window: time.Hour, WindowStart: start.Add(time.Duration(time.Now().UnixNano() / int64(time.Hour) * int64(time.Hour))), Units: 1, Limit: 10}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			j := &job.Job{ID: fmt.Sprintf("job_%03d", i), Tenant: "acme", Tool: "echo", Args: []byte(`{}`), State: job.StateQueued,
				CreatedAt: time.Now().UTC(), Guard: &job.GuardRecord{Outcome: policy.OutcomeAllow, Spend: []policy.Spend{sp}}}
			_, _, err := stores[i%3].CreateSpending(t.Context(), j, job.Charge{Spend: j.Guard.Spend}, 0, nil)
			var r *job.SpendRefused
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &r):
				refused.Add(1)
				if len(r.Spent.Used) != 1 || r.Spent.Used[0] != 10 {
					t.Errorf("refusal found %+v, want used [10]", r.Spent)
				}
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 190 {
		t.Fatalf("written %d, refused %d; want 10 and 190", ok.Load(), refused.Load())
	}
	var n int
	if err := stores[0].pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("%d jobs stored (%v), want 10", n, err)
	}
	gone := sp
	gone.Key = "effect:none"
	if used, err := stores[1].RefundSpends(t.Context(), []policy.Spend{sp, gone}); err != nil || fmt.Sprint(used) != "[9 -1]" {
		t.Fatalf("refund: counts %v, %v; want [9 -1] (no counter: -1)", used, err)
	}
	j := &job.Job{ID: "job_after_refund", Tenant: "acme", Tool: "echo", Args: []byte(`{}`), State: job.StateQueued, CreatedAt: time.Now().UTC(),
		Guard: &job.GuardRecord{Outcome: policy.OutcomeAllow, Spend: []policy.Spend{sp}}}
	if _, _, err := stores[2].CreateSpending(t.Context(), j, job.Charge{Spend: j.Guard.Spend}, 0, nil); err != nil {
		t.Fatalf("after a refund: %v", err)
	}
	// Full again: CheckSpend and Spend refuse, and Spend writes nothing.
	if _, ok := errors.AsType[*job.SpendRefused](stores[0].CheckSpend(t.Context(), job.Charge{Spend: []policy.Spend{sp}})); !ok {
		t.Fatal("CheckSpend of a full budget: not refused")
	}
	if _, err := stores[1].Spend(t.Context(), job.Charge{Spend: []policy.Spend{sp}}); !isRefused(err) {
		t.Fatalf("Spend of a full budget: %v, not refused", err)
	}
	if _, err := stores[2].RefundSpends(t.Context(), []policy.Spend{sp}); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].CheckSpend(t.Context(), job.Charge{Spend: []policy.Spend{sp}}); err != nil {
		t.Fatalf("CheckSpend with a unit left: %v", err)
	}
	if used, err := stores[1].Spend(t.Context(), job.Charge{Spend: []policy.Spend{sp}}); err != nil || len(used) != 1 || used[0] != 10 {
		t.Fatalf("Spend of the last unit: used %v, %v; want [10]", used, err)
	}
	if _, err := stores[2].Spend(t.Context(), job.Charge{Spend: []policy.Spend{sp}}); !isRefused(err) {
		t.Fatalf("Spend past the limit: %v, not refused", err)
	}
	var used int64
	if err := stores[0].pool.QueryRow(t.Context(), `SELECT used FROM guard_counters`).Scan(&used); err != nil || used != 10 {
		t.Fatalf("counter %d (%v), want 10", used, err)
	}
	// A rate limit of burst 2: the third call in a row is refused.
	for i := range 3 {
		j := &job.Job{ID: fmt.Sprintf("job_rate_%d", i), Tenant: "acme", Tool: "echo", Args: []byte(`{}`), State: job.StateQueued, CreatedAt: time.Now().UTC()}
		_, _, err := stores[i%3].CreateSpending(t.Context(), j, job.Charge{Rate: &policy.RateCharge{Tenant: "acme", Rate: 0.001, Burst: 2}}, 0, nil)
		var r *job.SpendRefused
		if (i < 2) != (err == nil) || (i == 2 && (!errors.As(err, &r) || r.Spent.Tokens >= 1)) {
			t.Fatalf("rate call %d: %v", i, err)
		}
	}
}

func isRefused(err error) bool {
	_, ok := errors.AsType[*job.SpendRefused](err)
	return ok
}

// The retention sweep deletes the counters of ended windows and of
// sessions no longer open; the current window's stay.
func TestGuardCountersPruned(t *testing.T) {
	t.Parallel()
	s := openPG(t, pgtest.Shared(t).NewDatabase(t))
	ctx := t.Context()
	hour := time.Duration(time.Now().UnixNano() / int64(time.Hour) * int64(time.Hour))
	now := time.Unix(0, int64(hour)).UTC()
	spends := []policy.Spend{
		{Tenant: "acme", Key: "effect:exec", Window: time.Hour, WindowStart: now, Units: 1, Limit: 10},                     // stays
		{Tenant: "acme", Key: "effect:exec", Window: time.Hour, WindowStart: now.Add(-2 * time.Hour), Units: 1, Limit: 10}, // ended
		{Tenant: "acme", Session: "ses_gone", Key: "tool:echo", Units: 1, Limit: 3},                                        // no such session
	}
	if _, err := s.Spend(ctx, job.Charge{Spend: spends}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteFinishedJobs(ctx, time.Now(), time.Now(), 10); err != nil {
		t.Fatal(err)
	}
	var n int
	var start int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*), max(window_start) FROM guard_counters`).Scan(&n, &start); err != nil || n != 1 || start != now.UnixNano() {
		t.Fatalf("%d counters left (%v), want the current window's only", n, err)
	}
}

// A job inserted with its spend into the shared queue is claimed at its
// insert like Enqueue's (job.SelfClaim): by the submitting replica while
// nothing waits; a refused spend writes and claims nothing.
func TestCreateSpendingSelfClaim(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	s := openPG(t, url)
	ctx := t.Context()
	l, err := s.Join(ctx, "r1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0).UTC()
	sp := policy.Spend{Tenant: "acme", Key: "effect:exec", Window: time.Hour, WindowStart: start.Add(time.Duration(time.Now().UnixNano() / int64(time.Hour) * int64(time.Hour))), Units: 1, Limit: 1}
	create := func(id string, self *job.SelfClaim) (bool, error) {
		j := &job.Job{ID: id, Tenant: "acme", Tool: "echo", Args: []byte(`{}`), State: job.StateQueued,
			CreatedAt: time.Now().UTC(), Guard: &job.GuardRecord{Outcome: policy.OutcomeAllow, Spend: []policy.Spend{sp}}}
		_, claimed, err := s.CreateSpending(ctx, j, job.Charge{Spend: j.Guard.Spend}, 100, self)
		return claimed, err
	}
	self := &job.SelfClaim{Lease: l}
	if claimed, err := create("job_a", self); err != nil || !claimed {
		t.Fatalf("first: claimed %v, %v; want claimed by r1", claimed, err)
	}
	if o, err := s.JobOwner(ctx, "job_a"); err != nil || o.Replica != "r1" {
		t.Fatalf("owner of job_a: %+v %v", o, err)
	}
	var r *job.SpendRefused
	if claimed, err := create("job_b", self); !errors.As(err, &r) || claimed {
		t.Fatalf("over the budget: claimed %v, %v; want a refusal", claimed, err)
	}
	if _, err := s.Get(ctx, "job_b"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("refused job stored: %v", err)
	}
}
