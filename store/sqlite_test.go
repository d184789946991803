package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

func openTemp(t *testing.T) (*SQLite, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

var base = time.Date(2026, 11, 30, 4, 0, 0, 123456789, time.UTC)

func newJob(id, tenant string, created time.Time) *job.Job {
	return &job.Job{
		ID: id, Tenant: tenant, Tool: "echo", CallID: "call_" + id,
		Args:      json.RawMessage(`{"text":"hi"}`),
		Limits:    runner.Limits{MemoryBytes: 64 << 20, Timeout: 5 * time.Second},
		State:     job.StateQueued,
		CreatedAt: created,
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	j := newJob("j1", "acme", base)
	j.IdempotencyKey = "k1"
	j.Runner = "fake"
	if err := s.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("Get = %+v, want %+v", got, j)
	}

	started, finished := base.Add(time.Second), base.Add(2*time.Second)
	j.State, j.Reason, j.Attempts = job.StateFailed, job.ReasonToolError, 1
	j.StartedAt, j.FinishedAt = &started, &finished
	j.Result = &tools.Result{OK: false, Content: "out", Error: "exit code 1",
		Effects: []tools.Effect{tools.EffectExec}, Usage: tools.Usage{WallMS: 12},
		Process: &tools.ProcessInfo{ExitCode: 1, Stdout: "out"}}
	if err := s.Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetByIdempotencyKey(ctx, "acme", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("after Update = %+v, want %+v", got, j)
	}

	if _, err := s.Get(ctx, "nope"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.GetByIdempotencyKey(ctx, "other", "k1"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("GetByIdempotencyKey other tenant: %v, want ErrNotFound", err)
	}
	if err := s.Update(ctx, newJob("nope", "acme", base)); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("Update missing: %v, want ErrNotFound", err)
	}
}

func TestConflict(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	a := newJob("a", "acme", base)
	a.IdempotencyKey = "same"
	if err := s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		j    func() *job.Job
		err  error
	}{
		{"same key same tenant", func() *job.Job { j := newJob("b", "acme", base); j.IdempotencyKey = "same"; return j }, job.ErrConflict},
		{"same id", func() *job.Job { return newJob("a", "other", base) }, job.ErrConflict},
		{"same key other tenant", func() *job.Job { j := newJob("c", "other", base); j.IdempotencyKey = "same"; return j }, nil},
		{"no key twice 1", func() *job.Job { return newJob("d", "acme", base) }, nil},
		{"no key twice 2", func() *job.Job { return newJob("e", "acme", base) }, nil},
	}
	for _, tt := range tests {
		if err := s.Create(ctx, tt.j()); !errors.Is(err, tt.err) {
			t.Errorf("%s: Create = %v, want %v", tt.name, err, tt.err)
		}
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	const n = 120
	for i := range n {
		// Pairs share a timestamp so the id tie-break is exercised.
		j := newJob(fmt.Sprintf("j%03d", i), "acme", base.Add(time.Duration(i/2)*time.Millisecond))
		if i%3 == 0 {
			j.Tool = "bash"
		}
		if i%4 == 0 {
			j.State = job.StateSucceeded
		}
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ctx, newJob("x", "other", base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}

	collect := func(f job.ListFilter) []string {
		var ids []string
		for page := 0; ; page++ {
			jobs, next, err := s.List(ctx, "acme", f)
			if err != nil {
				t.Fatal(err)
			}
			if f.Limit > 0 && len(jobs) > f.Limit {
				t.Fatalf("page of %d > limit %d", len(jobs), f.Limit)
			}
			for _, j := range jobs {
				ids = append(ids, j.ID)
			}
			if next == "" {
				return ids
			}
			if page > n {
				t.Fatal("pagination does not end")
			}
			f.Cursor = next
		}
	}

	ids := collect(job.ListFilter{Limit: 7})
	if len(ids) != n {
		t.Fatalf("got %d jobs, want %d", len(ids), n)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("j%03d", n-1-i); id != want {
			t.Fatalf("ids[%d] = %s, want %s (newest first)", i, id, want)
		}
	}
	if got := collect(job.ListFilter{Tool: "bash", Limit: 9}); len(got) != n/3 {
		t.Errorf("tool filter: %d jobs, want %d", len(got), n/3)
	}
	if got := collect(job.ListFilter{State: job.StateSucceeded, Limit: 500}); len(got) != n/4 {
		t.Errorf("state filter: %d jobs, want %d", len(got), n/4)
	}
	if jobs, next, err := s.List(ctx, "acme", job.ListFilter{}); err != nil || len(jobs) != 50 || next == "" {
		t.Errorf("default limit: %d jobs, next %q, err %v; want 50 and a cursor", len(jobs), next, err)
	}
	if _, _, err := s.List(ctx, "acme", job.ListFilter{Cursor: "!!"}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("bad cursor: %v, want ErrInvalid", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := newJob("keep", "acme", base)
	if err := s.Create(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path) // migrations run again and must be no-ops
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get(t.Context(), "keep")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen %+v, want %+v", got, want)
	}
	var versions int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&versions); err != nil || versions != len(migrations) {
		t.Fatalf("schema_migrations has %d rows (err %v), want %d", versions, err, len(migrations))
	}
}

func TestListUnfinished(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	for i, st := range []job.State{job.StateRunning, job.StateSucceeded, job.StateQueued, job.StateCancelled, job.StateFailed} {
		j := newJob(fmt.Sprintf("j%d", i), "acme", base.Add(time.Duration(i)*time.Second))
		j.State = st
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := s.ListUnfinished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "j0" || jobs[1].ID != "j2" {
		t.Fatalf("ListUnfinished = %v, want j0 (running), j2 (queued)", jobs)
	}
}

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	other, err := Open(path) // a second handle on the same file
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := range writers {
		st := s
		if w%2 == 1 {
			st = other
		}
		wg.Go(func() {
			for i := range each {
				j := newJob(fmt.Sprintf("w%d-%d", w, i), "acme", base.Add(time.Duration(i)*time.Microsecond))
				j.IdempotencyKey = fmt.Sprintf("k%d", i) // every writer races for the same keys
				err := st.Create(ctx, j)
				if errors.Is(err, job.ErrConflict) {
					continue
				}
				if err != nil {
					errs <- err
					continue
				}
				j.State = job.StateRunning
				j.Attempts++
				if err := st.Update(ctx, j); err != nil {
					errs <- err
				}
				if _, _, err := st.List(ctx, "acme", job.ListFilter{Limit: 10}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	jobs, _, err := s.List(ctx, "acme", job.ListFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != each {
		t.Fatalf("%d jobs, want %d (one per idempotency key)", len(jobs), each)
	}
	for _, j := range jobs {
		if j.State != job.StateRunning || j.Attempts != 1 {
			t.Errorf("job %s: state %s attempts %d, want running 1", j.ID, j.State, j.Attempts)
		}
	}
}

// The console's filters: every tenant's jobs (AllTenants), one session's,
// a created_at range; and a job's callback record round-trips.
func TestListFiltersAndCallback(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	for i, tenant := range []string{"a", "b", "a", "b"} {
		j := newJob(fmt.Sprintf("job_%d", i), tenant, base.Add(time.Duration(i)*time.Minute))
		if i >= 2 {
			j.SessionID = "ses_1"
		}
		if i == 3 {
			j.Callback = &job.Callback{URL: "https://example.com/hook", State: job.CallbackPending}
		}
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(tenant string, f job.ListFilter) string {
		t.Helper()
		jobs, _, err := s.List(ctx, tenant, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		tenant string
		f      job.ListFilter
		want   string
	}{
		{job.AllTenants, job.ListFilter{}, "job_3,job_2,job_1,job_0"},
		{"a", job.ListFilter{}, "job_2,job_0"},
		{job.AllTenants, job.ListFilter{SessionID: "ses_1"}, "job_3,job_2"},
		{"b", job.ListFilter{SessionID: "ses_1"}, "job_3"},
		{job.AllTenants, job.ListFilter{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}, "job_2,job_1"},
		{job.AllTenants, job.ListFilter{Since: base.Add(time.Hour)}, ""},
		{job.AllTenants, job.ListFilter{Limit: 2}, "job_3,job_2"},
	} {
		if got := ids(tc.tenant, tc.f); got != tc.want {
			t.Errorf("List(%q, %+v) = %s, want %s", tc.tenant, tc.f, got, tc.want)
		}
	}
	j, err := s.Get(ctx, "job_3")
	if err != nil {
		t.Fatal(err)
	}
	pending := func() string {
		t.Helper()
		jobs, err := s.ListPendingCallbacks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	if got := pending(); got != "" {
		t.Errorf("a queued job's callback is listed as undelivered: %s", got)
	}
	fin := base.Add(time.Hour)
	j.State, j.StartedAt, j.FinishedAt = job.StateSucceeded, &fin, &fin
	if err := s.Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != "job_3" {
		t.Errorf("pending callbacks %q, want job_3", got)
	}
	j.Callback.State = job.CallbackDelivered
	j.Callback.Attempts = []job.CallbackAttempt{{At: base, DurationMS: 3, Status: 204}}
	if err := s.Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "job_3")
	if err != nil || got.Callback == nil || got.Callback.State != job.CallbackDelivered || len(got.Callback.Attempts) != 1 || got.Callback.Attempts[0].Status != 204 {
		t.Errorf("callback after update: %+v (%v)", got.Callback, err)
	}
	if got := pending(); got != "" {
		t.Errorf("a delivered callback is still listed: %s", got)
	}
	if got, _ := s.Get(ctx, "job_0"); got.Callback != nil {
		t.Errorf("job without a callback reads back %+v", got.Callback)
	}
}

// Concurrent jobs' writes share transactions (group commit), each still
// durable on its own: every job's three writes are there after a reopen,
// and fewer transactions than writes ran.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	ctx := t.Context()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			j := newJob(fmt.Sprintf("g%d", i), "acme", base.Add(time.Duration(i)*time.Microsecond))
			if err := s.Create(ctx, j); err != nil {
				errs <- err
				return
			}
			j.State, j.Attempts = job.StateRunning, 1
			if err := s.Update(ctx, j); err != nil {
				errs <- err
				return
			}
			j.State = job.StateSucceeded
			if err := s.Update(ctx, j); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.GroupStats()
	t.Logf("group commit: %+v", st)
	if st.Writes != 3*n || st.Batches >= st.Writes {
		t.Errorf("stats %+v: want %d writes in fewer transactions", st, 3*n)
	}
	if err := s.Update(ctx, newJob("missing", "acme", base)); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Update of a missing job = %v", err)
	}
	s.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	jobs, _, err := r.List(ctx, "acme", job.ListFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != n {
		t.Fatalf("%d jobs after reopen, want %d", len(jobs), n)
	}
	for _, j := range jobs {
		if j.State != job.StateSucceeded || j.Attempts != 1 {
			t.Errorf("job %s: %s attempts %d", j.ID, j.State, j.Attempts)
		}
	}
}
