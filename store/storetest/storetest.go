// Package storetest is the conformance suite of job.Store: one set of
// tests every backend passes (like runner/runnertest for runners). The
// store package runs it against SQLite and against a real PostgreSQL
// (store/pgtest).
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Backend opens stores of one kind for the suite.
type Backend struct {
	// Open returns a new, empty store and a function opening the same
	// database again (a restart, or a second replica on it). Both are
	// closed by t.Cleanup.
	Open func(t *testing.T) (s job.Store, reopen func() job.Store)
	// Break opens a new, empty store and returns it with a function that
	// makes its database unusable (unreachable, or full) and one that
	// makes it usable again.
	Break func(t *testing.T) (s job.Store, brk, restore func())
}

// Run runs every test of the suite against b.
func Run(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"JobRoundTrip", testJobRoundTrip},
		{"Conflicts", testConflicts},
		{"IdempotencyRace", testIdempotencyRace},
		{"ListPagination", testListPagination},
		{"ListFilters", testListFilters},
		{"Unfinished", testUnfinished},
		{"PendingCallbacks", testPendingCallbacks},
		{"Sessions", testSessions},
		{"Approvals", testApprovals},
		{"Spends", testSpends},
		{"Events", testEvents},
		{"Artifacts", testArtifacts},
		{"Retention", testRetention},
		{"Batches", testBatches},
		{"BatchRetention", testBatchRetention},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Reopen", testReopen},
		{"Unavailable", testUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, b)
		})
	}
}

var base = time.Date(2026, 11, 30, 4, 0, 0, 123456789, time.UTC)

// NewJob is a queued job of tenant created at created.
func NewJob(id, tenant string, created time.Time) *job.Job {
	return &job.Job{
		ID: id, Tenant: tenant, Tool: "echo", CallID: "call_" + id,
		Args:      json.RawMessage(`{"text":"hi"}`),
		Limits:    runner.Limits{MemoryBytes: 64 << 20, Timeout: 5 * time.Second},
		State:     job.StateQueued,
		CreatedAt: created,
	}
}

func open(t *testing.T, b Backend) job.Store {
	s, _ := b.Open(t)
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

func finish(t *testing.T, s job.Store, j *job.Job, at time.Time, state job.State) {
	t.Helper()
	started := at.Add(-time.Millisecond)
	j.State, j.StartedAt, j.FinishedAt, j.Attempts = state, &started, &at, 1
	j.Result = &tools.Result{OK: state == job.StateSucceeded, Content: "out" + j.ID}
	must(t, s.Update(t.Context(), j))
}

func testJobRoundTrip(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	j := NewJob("j1", "acme", base)
	j.IdempotencyKey, j.Runner, j.SessionID = "k1", "fake", "ses_1"
	j.Tags, j.Metadata = []string{"eval", "run-7"}, map[string]string{"user": "u1", "a.b": "x y"}
	j.Retry = true
	must(t, s.Create(ctx, j))
	got, err := s.Get(ctx, "j1")
	must(t, err)
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("Get = %+v, want %+v", got, j)
	}

	started, finished := base.Add(time.Second), base.Add(2*time.Second)
	j.State, j.Reason, j.Attempts = job.StateFailed, job.ReasonToolError, 1
	j.StartedAt, j.FinishedAt = &started, &finished
	j.Result = &tools.Result{OK: false, Content: "outerr", Error: "exit code 1",
		Effects: []tools.Effect{tools.EffectExec}, Usage: tools.Usage{WallMS: 12},
		Process: &tools.ProcessInfo{ExitCode: 1, Stdout: "out", Stderr: "err"}}
	j.Guard = &job.GuardRecord{Outcome: policy.OutcomeAllow, Rule: "default",
		Spend:     []policy.Spend{{Tenant: "acme", Key: "budget:exec", Units: 3}},
		DecidedAt: base.Add(time.Millisecond)}
	j.Egress = []job.EgressRecord{{Time: base.Add(3 * time.Millisecond), Method: "GET", Host: "example.com", Port: 443,
		Allowed: true, Rule: 0, BytesOut: 10, BytesIn: 20}}
	j.Callback = &job.Callback{URL: "https://example.com/hook", State: "delivered",
		Attempts: []job.CallbackAttempt{{At: base.Add(4 * time.Second), DurationMS: 5, Status: 200}}}
	j.Cached = true
	j.Hooks = []job.HookRecord{{Phase: "before", URL: "https://example.com/before", Outcome: "rewrite", Status: 200,
		DurationMS: 3, Time: base.Add(5 * time.Millisecond)}}
	j.Retry = false // fixed at Create: Update keeps it
	must(t, s.Update(ctx, j))
	j.Retry = true
	got, err = s.GetByIdempotencyKey(ctx, "acme", "k1")
	must(t, err)
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("after Update = %+v, want %+v", got, j)
	}

	_, err = s.Get(ctx, "nope")
	wantIs(t, "Get missing", err, job.ErrNotFound)
	_, err = s.GetByIdempotencyKey(ctx, "other", "k1")
	wantIs(t, "key of another tenant", err, job.ErrNotFound)
	_, err = s.GetByIdempotencyKey(ctx, "acme", "")
	wantIs(t, "empty key", err, job.ErrNotFound)
	wantIs(t, "Update missing", s.Update(ctx, NewJob("nope", "acme", base)), job.ErrNotFound)

	bad := NewJob("j2", "acme", base)
	bad.Args = json.RawMessage(`{not json`)
	wantIs(t, "invalid args", s.Create(ctx, bad), job.ErrInvalid)
	_, err = s.Get(ctx, "j2")
	wantIs(t, "invalid job stored", err, job.ErrNotFound)

	// A job without arguments or result round-trips with nil fields.
	bare := NewJob("j3", "acme", base)
	bare.Args = nil
	must(t, s.Create(ctx, bare))
	got, err = s.Get(ctx, "j3")
	must(t, err)
	if got.Args != nil || got.Result != nil || got.Guard != nil || got.Egress != nil || got.Callback != nil {
		t.Fatalf("bare job = %+v", got)
	}
}

func testConflicts(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	a := NewJob("a", "acme", base)
	a.IdempotencyKey = "k"
	must(t, s.Create(ctx, a))
	wantIs(t, "duplicate id", s.Create(ctx, NewJob("a", "other", base)), job.ErrConflict)
	dup := NewJob("b", "acme", base)
	dup.IdempotencyKey = "k"
	wantIs(t, "duplicate key", s.Create(ctx, dup), job.ErrConflict)
	_, err := s.Get(ctx, "b")
	wantIs(t, "conflicting job stored", err, job.ErrNotFound)
	other := NewJob("c", "other", base)
	other.IdempotencyKey = "k"
	must(t, s.Create(ctx, other)) // keys are per tenant
	d := NewJob("d", "acme", base)
	must(t, s.Create(ctx, d))
	d.IdempotencyKey = "k"
	wantIs(t, "update to a used key", s.Update(ctx, d), job.ErrConflict)
	got, err := s.Get(ctx, "d")
	must(t, err)
	if got.IdempotencyKey != "" {
		t.Fatalf("failed update changed the key: %q", got.IdempotencyKey)
	}
}

// Submissions with one key, from many goroutines (on two handles of the
// database when the backend has them): exactly one is recorded.
func testIdempotencyRace(t *testing.T, b Backend) {
	s1, reopen := b.Open(t)
	s2 := reopen()
	ctx := t.Context()
	var ok, conflict atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if i%2 == 1 {
				s = s2
			}
			j := NewJob(fmt.Sprintf("r%d", i), "acme", base)
			j.IdempotencyKey = "same"
			switch err := s.Create(ctx, j); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, job.ErrConflict):
				conflict.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || conflict.Load() != 39 {
		t.Fatalf("%d created, %d conflicts; want 1 and 39", ok.Load(), conflict.Load())
	}
	jobs, _, err := s1.List(ctx, "acme", job.ListFilter{Limit: 100})
	must(t, err)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs recorded", len(jobs))
	}
}

func ids[T any](xs []T, id func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

func jobID(j *job.Job) string { return j.ID }

func testListPagination(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	var want []string
	for i := range 120 {
		// Two jobs per timestamp: the cursor's id tiebreak matters.
		j := NewJob(fmt.Sprintf("j%03d", i), "acme", base.Add(time.Duration(i/2)*time.Second))
		must(t, s.Create(ctx, j))
		want = append(want, j.ID)
		must(t, s.Create(ctx, NewJob(fmt.Sprintf("x%03d", i), "other", base)))
	}
	slices.Reverse(want)
	var got []string
	cursor := ""
	pages := 0
	for {
		jobs, next, err := s.List(ctx, "acme", job.ListFilter{Limit: 50, Cursor: cursor})
		must(t, err)
		pages++
		got = append(got, ids(jobs, jobID)...)
		if next == "" {
			break
		}
		cursor = next
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages, %v; want 3 pages of %v", pages, got, want)
	}
	jobs, _, err := s.List(ctx, "acme", job.ListFilter{})
	must(t, err)
	if len(jobs) != 50 {
		t.Fatalf("default limit: %d jobs", len(jobs))
	}
	all, next, err := s.List(ctx, job.AllTenants, job.ListFilter{Limit: 500})
	must(t, err)
	if len(all) != 240 || next != "" {
		t.Fatalf("AllTenants: %d jobs, next %q", len(all), next)
	}
	for _, c := range []string{"!!", "bm9jb2xvbg", "eDp5"} {
		_, _, err = s.List(ctx, "acme", job.ListFilter{Cursor: c})
		wantIs(t, "malformed cursor "+c, err, job.ErrInvalid)
	}
	none, next, err := s.List(ctx, "nobody", job.ListFilter{})
	must(t, err)
	if len(none) != 0 || next != "" {
		t.Fatalf("unknown tenant: %d jobs", len(none))
	}
}

func testListFilters(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	for i := range 10 {
		j := NewJob(fmt.Sprintf("j%d", i), "acme", base.Add(time.Duration(i)*time.Minute))
		if i%2 == 0 {
			j.Tool = "calc"
		}
		if i < 3 {
			j.SessionID = "ses_a"
		}
		if i%2 == 1 {
			j.Tags = append(j.Tags, "odd")
		}
		if i < 4 {
			j.Tags = append(j.Tags, "low")
		}
		j.Metadata = map[string]string{"user": fmt.Sprintf("u%d", i%3)}
		if i == 0 {
			j.Metadata["a.b"] = "1"
		}
		must(t, s.Create(ctx, j))
		if i%3 == 0 {
			finish(t, s, j, j.CreatedAt.Add(time.Second), job.StateSucceeded)
		}
	}
	for _, tc := range []struct {
		name string
		f    job.ListFilter
		want []string
	}{
		{"tool", job.ListFilter{Tool: "calc"}, []string{"j8", "j6", "j4", "j2", "j0"}},
		{"state", job.ListFilter{State: job.StateSucceeded}, []string{"j9", "j6", "j3", "j0"}},
		{"session", job.ListFilter{SessionID: "ses_a"}, []string{"j2", "j1", "j0"}},
		{"since", job.ListFilter{Since: base.Add(7 * time.Minute)}, []string{"j9", "j8", "j7"}},
		{"until", job.ListFilter{Until: base.Add(2 * time.Minute)}, []string{"j1", "j0"}},
		{"window and tool", job.ListFilter{Tool: "calc", Since: base.Add(2 * time.Minute), Until: base.Add(6 * time.Minute)}, []string{"j4", "j2"}},
		{"tag", job.ListFilter{LabelFilter: job.LabelFilter{Tags: []string{"odd"}}}, []string{"j9", "j7", "j5", "j3", "j1"}},
		{"two tags", job.ListFilter{LabelFilter: job.LabelFilter{Tags: []string{"odd", "low"}}}, []string{"j3", "j1"}},
		{"metadata", job.ListFilter{LabelFilter: job.LabelFilter{Metadata: map[string]string{"user": "u2"}}}, []string{"j8", "j5", "j2"}},
		{"metadata, tag and tool", job.ListFilter{Tool: "calc", LabelFilter: job.LabelFilter{Tags: []string{"low"}, Metadata: map[string]string{"user": "u2"}}}, []string{"j2"}},
		{"metadata key with a dot", job.ListFilter{LabelFilter: job.LabelFilter{Metadata: map[string]string{"a.b": "1"}}}, []string{"j0"}},
	} {
		jobs, _, err := s.List(ctx, "acme", tc.f)
		must(t, err)
		if got := ids(jobs, jobID); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		jobs, _, err = s.List(ctx, job.AllTenants, tc.f)
		must(t, err)
		if got := ids(jobs, jobID); !slices.Equal(got, tc.want) {
			t.Errorf("%s (AllTenants): %v, want %v", tc.name, got, tc.want)
		}
	}
}

func testUnfinished(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	for i, st := range []job.State{job.StateQueued, job.StateRunning, job.StatePendingApproval, job.StateSucceeded, job.StateFailed, job.StateCancelled, job.StateQueued} {
		j := NewJob(fmt.Sprintf("j%d", i), "acme", base.Add(time.Duration(-i)*time.Second))
		must(t, s.Create(ctx, j))
		if st != job.StateQueued {
			j.State = st
			must(t, s.Update(ctx, j))
		}
	}
	jobs, err := s.ListUnfinished(ctx)
	must(t, err)
	if got, want := ids(jobs, jobID), []string{"j6", "j2", "j1", "j0"}; !slices.Equal(got, want) {
		t.Fatalf("ListUnfinished = %v, want %v (oldest first)", got, want)
	}
}

func testPendingCallbacks(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	for i := range 5 {
		j := NewJob(fmt.Sprintf("j%d", i), "acme", base)
		j.Callback = &job.Callback{URL: "https://example.com/h", State: "pending"}
		must(t, s.Create(ctx, j))
		switch i {
		case 0, 1:
			finish(t, s, j, base.Add(time.Duration(10-i)*time.Second), job.StateSucceeded)
		case 2:
			j.Callback.State = "delivered"
			finish(t, s, j, base.Add(time.Second), job.StateFailed)
		case 3: // running: its callback is not due yet
			j.State = job.StateRunning
			must(t, s.Update(ctx, j))
		}
	}
	must(t, s.Create(ctx, NewJob("nocb", "acme", base)))
	jobs, err := s.ListPendingCallbacks(ctx)
	must(t, err)
	if got, want := ids(jobs, jobID), []string{"j1", "j0"}; !slices.Equal(got, want) {
		t.Fatalf("ListPendingCallbacks = %v, want %v (earliest finished first)", got, want)
	}
}

func newSession(id, tenant string, created time.Time) *job.Session {
	return &job.Session{
		ID: id, Tenant: tenant, Image: "img", Effects: []tools.Effect{tools.EffectExec},
		Limits: runner.Limits{MemoryBytes: 1 << 20}, State: job.SessionActive,
		TTL: time.Hour, IdleTimeout: time.Minute,
		CreatedAt: created, ExpiresAt: created.Add(time.Hour), LastUsedAt: created,
	}
}

func testSessions(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	ss := newSession("s1", "acme", base)
	ss.Tags, ss.Metadata = []string{"agent-a"}, map[string]string{"run": "r1"}
	must(t, s.CreateSession(ctx, ss))
	wantIs(t, "duplicate session", s.CreateSession(ctx, newSession("s1", "other", base)), job.ErrConflict)
	got, err := s.GetSession(ctx, "s1")
	must(t, err)
	if !reflect.DeepEqual(got, ss) {
		t.Fatalf("GetSession = %+v, want %+v", got, ss)
	}
	closed := base.Add(time.Minute)
	ss.State, ss.Reason, ss.LastUsedAt, ss.ClosedAt = job.SessionClosed, "idle", base.Add(30*time.Second), &closed
	must(t, s.UpdateSession(ctx, ss))
	got, err = s.GetSession(ctx, "s1")
	must(t, err)
	if !reflect.DeepEqual(got, ss) {
		t.Fatalf("after UpdateSession = %+v, want %+v", got, ss)
	}
	_, err = s.GetSession(ctx, "nope")
	wantIs(t, "GetSession missing", err, job.ErrNotFound)
	wantIs(t, "UpdateSession missing", s.UpdateSession(ctx, newSession("nope", "acme", base)), job.ErrNotFound)

	for i := range 7 {
		x := newSession(fmt.Sprintf("s%d", i+2), "acme", base.Add(time.Duration(i+1)*time.Second))
		if i == 0 {
			x.State = job.SessionCreating
		}
		must(t, s.CreateSession(ctx, x))
	}
	must(t, s.CreateSession(ctx, newSession("o1", "other", base)))
	var got2 []string
	cursor := ""
	for {
		page, next, err := s.ListSessions(ctx, "acme", job.SessionFilter{Limit: 3, Cursor: cursor})
		must(t, err)
		got2 = append(got2, ids(page, func(x *job.Session) string { return x.ID })...)
		if next == "" {
			break
		}
		cursor = next
	}
	if want := []string{"s8", "s7", "s6", "s5", "s4", "s3", "s2", "s1"}; !slices.Equal(got2, want) {
		t.Fatalf("ListSessions = %v, want %v", got2, want)
	}
	closedOnes, _, err := s.ListSessions(ctx, job.AllTenants, job.SessionFilter{State: job.SessionClosed})
	must(t, err)
	if len(closedOnes) != 1 || closedOnes[0].ID != "s1" {
		t.Fatalf("closed sessions = %v", ids(closedOnes, func(x *job.Session) string { return x.ID }))
	}
	tagged, _, err := s.ListSessions(ctx, "acme", job.SessionFilter{LabelFilter: job.LabelFilter{Tags: []string{"agent-a"}, Metadata: map[string]string{"run": "r1"}}})
	must(t, err)
	if len(tagged) != 1 || tagged[0].ID != "s1" {
		t.Fatalf("sessions by label: %v", ids(tagged, func(x *job.Session) string { return x.ID }))
	}
	open, err := s.ListOpenSessions(ctx)
	must(t, err)
	if len(open) != 8 || open[0].ID != "o1" {
		t.Fatalf("ListOpenSessions: %v", ids(open, func(x *job.Session) string { return x.ID }))
	}
}

func newApproval(id, jobID string, created time.Time) *job.Approval {
	return &job.Approval{ID: id, Tenant: "acme", JobID: jobID, SessionID: "ses", Tool: "exec",
		Arguments: json.RawMessage(`{"cmd":"ls"}`), Effects: []tools.Effect{tools.EffectExec},
		Rule: "r1", Reason: "needs a human", State: job.ApprovalPending,
		CreatedAt: created, ExpiresAt: created.Add(time.Minute)}
}

func testApprovals(t *testing.T, b Backend) {
	s1, reopen := b.Open(t)
	s2 := reopen()
	ctx := t.Context()
	a := newApproval("ap1", "j1", base)
	must(t, s1.CreateApproval(ctx, a))
	wantIs(t, "duplicate approval id", s1.CreateApproval(ctx, newApproval("ap1", "j9", base)), job.ErrConflict)
	wantIs(t, "second approval of a job", s1.CreateApproval(ctx, newApproval("ap9", "j1", base)), job.ErrConflict)
	got, err := s2.GetApproval(ctx, "ap1")
	must(t, err)
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("GetApproval = %+v, want %+v", got, a)
	}
	_, err = s1.GetApproval(ctx, "nope")
	wantIs(t, "GetApproval missing", err, job.ErrNotFound)
	bad := newApproval("ap2", "j2", base)
	bad.Arguments = json.RawMessage(`{`)
	wantIs(t, "invalid arguments", s1.CreateApproval(ctx, bad), job.ErrInvalid)

	// Deciders race on two handles: exactly one wins.
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if i%2 == 1 {
				s = s2
			}
			at := base.Add(time.Second)
			d := *a
			d.State, d.DecidedAt, d.DecisionReason = job.ApprovalApproved, &at, fmt.Sprintf("by %d", i)
			switch err := s.DecideApproval(ctx, &d); {
			case err == nil:
				won.Add(1)
			case errors.Is(err, job.ErrConflict):
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d deciders won", won.Load())
	}
	got, err = s1.GetApproval(ctx, "ap1")
	must(t, err)
	if got.State != job.ApprovalApproved || got.DecidedAt == nil || !strings.HasPrefix(got.DecisionReason, "by ") {
		t.Fatalf("decided approval = %+v", got)
	}
	wantIs(t, "decide missing", s1.DecideApproval(ctx, newApproval("nope", "x", base)), job.ErrNotFound)

	for i := range 4 {
		must(t, s1.CreateApproval(ctx, newApproval(fmt.Sprintf("ap%d", i+3), fmt.Sprintf("j%d", i+3), base.Add(time.Duration(i+1)*time.Second))))
	}
	pending, err := s2.ListPendingApprovals(ctx)
	must(t, err)
	if got, want := ids(pending, func(x *job.Approval) string { return x.ID }), []string{"ap3", "ap4", "ap5", "ap6"}; !slices.Equal(got, want) {
		t.Fatalf("ListPendingApprovals = %v, want %v", got, want)
	}
	var all []string
	cursor := ""
	for {
		p, next, err := s1.ListApprovals(ctx, "acme", job.ApprovalFilter{Limit: 2, Cursor: cursor})
		must(t, err)
		all = append(all, ids(p, func(x *job.Approval) string { return x.ID })...)
		if next == "" {
			break
		}
		cursor = next
	}
	if want := []string{"ap6", "ap5", "ap4", "ap3", "ap1"}; !slices.Equal(all, want) {
		t.Fatalf("ListApprovals = %v, want %v", all, want)
	}
	decided, _, err := s1.ListApprovals(ctx, job.AllTenants, job.ApprovalFilter{State: job.ApprovalApproved})
	must(t, err)
	if len(decided) != 1 {
		t.Fatalf("approved: %d", len(decided))
	}
}

func testSpends(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	mk := func(id string, created time.Time, units int64, refunded bool) {
		j := NewJob(id, "acme", created)
		j.Guard = &job.GuardRecord{Outcome: policy.OutcomeAllow, Rule: "default", Refunded: refunded,
			Spend: []policy.Spend{{Tenant: "acme", Key: "budget:exec", Window: time.Hour, WindowStart: base, Units: units}}}
		must(t, s.Create(ctx, j))
	}
	mk("old", base.Add(-time.Hour), 100, false)
	mk("a", base, 1, false)
	mk("b", base.Add(time.Second), 2, false)
	mk("refunded", base.Add(time.Second), 50, true)
	must(t, s.Create(ctx, NewJob("unguarded", "acme", base)))
	spends, err := s.ListSpends(ctx, base)
	must(t, err)
	var sum int64
	for _, sp := range spends {
		sum += sp.Units
		if sp.Window != time.Hour || !sp.WindowStart.Equal(base) {
			t.Errorf("spend %+v lost its window", sp)
		}
	}
	if len(spends) != 2 || sum != 3 {
		t.Fatalf("ListSpends = %+v, want the 2 unrefunded since base (3 units)", spends)
	}
}

func testEvents(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	must(t, s.Create(ctx, NewJob("j1", "acme", base)))
	must(t, s.Create(ctx, NewJob("j2", "acme", base)))
	ev := func(id string, seq int, typ job.EventType, data string) job.EventRecord {
		return job.EventRecord{JobID: id, Seq: seq, Type: typ, Time: base.Add(time.Duration(seq) * time.Millisecond), Data: data}
	}
	// Output chunks may split UTF-8 and hold any byte.
	must(t, s.AppendEvents(ctx, []job.EventRecord{ev("j1", 1, job.EventQueued, ""), ev("j1", 2, job.EventStdout, "a\x00\xff\xe2\x82"),
		ev("j2", 1, job.EventQueued, "")}))
	// A retried batch keeps what was recorded.
	must(t, s.AppendEvents(ctx, []job.EventRecord{ev("j1", 2, job.EventStdout, "changed"), ev("j1", 3, job.EventStderr, "e")}))
	got, err := s.ListEvents(ctx, "j1", 0, 0)
	must(t, err)
	want := []job.EventRecord{ev("j1", 1, job.EventQueued, ""), ev("j1", 2, job.EventStdout, "a\x00\xff\xe2\x82"), ev("j1", 3, job.EventStderr, "e")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEvents = %+v, want %+v", got, want)
	}
	// A batch naming a missing job writes nothing at all.
	err = s.AppendEvents(ctx, []job.EventRecord{ev("j1", 4, job.EventStdout, "x"), ev("ghost", 1, job.EventQueued, "")})
	wantIs(t, "event of a missing job", err, job.ErrNotFound)
	if got, _ := s.ListEvents(ctx, "j1", 3, 0); len(got) != 0 {
		t.Fatalf("half a failed batch written: %+v", got)
	}
	if got, err := s.ListEvents(ctx, "ghost", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("events of a missing job: %v, %v", got, err)
	}
	must(t, s.AppendEvents(ctx, nil))

	// A batch larger than one INSERT, then paging with after and limit.
	var big []job.EventRecord
	for i := range 1100 {
		big = append(big, ev("j2", i+2, job.EventStdout, fmt.Sprint(i)))
	}
	must(t, s.AppendEvents(ctx, big))
	page, err := s.ListEvents(ctx, "j2", 0, 0)
	must(t, err)
	if len(page) != 256 || page[0].Seq != 1 {
		t.Fatalf("default page: %d events from %d", len(page), page[0].Seq)
	}
	page, err = s.ListEvents(ctx, "j2", 100, 5000)
	must(t, err)
	if len(page) != 1000 || page[0].Seq != 101 || page[999].Seq != 1100 {
		t.Fatalf("capped page: %d events, %d..%d", len(page), page[0].Seq, page[len(page)-1].Seq)
	}
	page, err = s.ListEvents(ctx, "j2", 1095, 10)
	must(t, err)
	if len(page) != 6 || page[5].Seq != 1101 {
		t.Fatalf("last page: %+v", page)
	}
}

func testArtifacts(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	must(t, s.Create(ctx, NewJob("j1", "acme", base)))
	data := []byte("\x89PNG\r\n\x1a\n\x00\x01")
	must(t, s.PutArtifact(ctx, "j1", tools.Artifact{Name: "plot.png", MimeType: "image/png", Data: data}))
	must(t, s.PutArtifact(ctx, "j1", tools.Artifact{Name: "empty.txt", MimeType: "text/plain"}))
	wantIs(t, "duplicate artifact", s.PutArtifact(ctx, "j1", tools.Artifact{Name: "plot.png", MimeType: "image/png", Data: []byte("x")}), job.ErrConflict)
	wantIs(t, "artifact of a missing job", s.PutArtifact(ctx, "ghost", tools.Artifact{Name: "a", MimeType: "text/plain"}), job.ErrNotFound)
	a, err := s.GetArtifact(ctx, "j1", "plot.png")
	must(t, err)
	if a.Name != "plot.png" || a.MimeType != "image/png" || a.Size != int64(len(data)) || string(a.Data) != string(data) {
		t.Fatalf("GetArtifact = %+v", a)
	}
	a, err = s.GetArtifact(ctx, "j1", "empty.txt")
	must(t, err)
	if a.Size != 0 || len(a.Data) != 0 {
		t.Fatalf("empty artifact = %+v", a)
	}
	_, err = s.GetArtifact(ctx, "j1", "nope")
	wantIs(t, "missing artifact", err, job.ErrNotFound)
}

func testRetention(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := t.Context()
	before, err := s.Size(ctx)
	must(t, err)
	for i := range 6 {
		j := NewJob(fmt.Sprintf("j%d", i), "acme", base)
		if i == 4 { // guarded, recent: kept for ListSpends
			j.Guard = &job.GuardRecord{Outcome: policy.OutcomeAllow, Rule: "r", Spend: []policy.Spend{{Tenant: "acme", Key: "k", Units: 1}}}
		}
		must(t, s.Create(ctx, j))
		must(t, s.AppendEvents(ctx, []job.EventRecord{{JobID: j.ID, Seq: 1, Type: job.EventStdout, Time: base, Data: strings.Repeat("x", 1000)}}))
		must(t, s.PutArtifact(ctx, j.ID, tools.Artifact{Name: "a", MimeType: "text/plain", Data: []byte(strings.Repeat("y", 500))}))
		must(t, s.CreateApproval(ctx, newApproval("ap"+j.ID, j.ID, base)))
		if i != 5 { // j5 stays running
			finish(t, s, j, base.Add(time.Duration(i+1)*time.Minute), job.StateSucceeded)
		}
	}
	after, err := s.Size(ctx)
	must(t, err)
	if after.Bytes <= before.Bytes || after.FileBytes <= 0 {
		t.Fatalf("Size before %+v, after writes %+v", before, after)
	}
	// Finished before base+3m30s: j0, j1, j2 (j3 later, j4 guarded, j5 running); two per batch.
	cut := base.Add(3*time.Minute + 30*time.Second)
	d, err := s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 2)
	must(t, err)
	if d.Jobs != 2 || d.Bytes < 2*1500 {
		t.Fatalf("first batch: %+v", d)
	}
	d, err = s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 2)
	must(t, err)
	if d.Jobs != 1 {
		t.Fatalf("second batch: %+v", d)
	}
	d, err = s.DeleteFinishedJobs(ctx, cut, base.Add(-time.Hour), 2)
	must(t, err)
	if d.Jobs != 0 || d.Bytes != 0 {
		t.Fatalf("nothing left: %+v", d)
	}
	// keepGuardedSince in the past: the guarded job goes too.
	d, err = s.DeleteFinishedJobs(ctx, base.Add(time.Hour), base.Add(time.Hour), 0)
	must(t, err)
	if d.Jobs != 2 {
		t.Fatalf("the rest: %+v, want j3 and j4", d)
	}
	for i := range 5 {
		id := fmt.Sprintf("j%d", i)
		_, err := s.Get(ctx, id)
		wantIs(t, "deleted job "+id, err, job.ErrNotFound)
		_, err = s.GetArtifact(ctx, id, "a")
		wantIs(t, "artifact of deleted job "+id, err, job.ErrNotFound)
		_, err = s.GetApproval(ctx, "ap"+id)
		wantIs(t, "approval of deleted job "+id, err, job.ErrNotFound)
		if evs, _ := s.ListEvents(ctx, id, 0, 0); len(evs) != 0 {
			t.Fatalf("events of deleted job %s kept", id)
		}
	}
	if _, err := s.Get(ctx, "j5"); err != nil {
		t.Fatalf("running job deleted: %v", err)
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
}

// Writers on several goroutines and handles interleave creates, updates,
// events and artifacts; every write is there afterwards.
func testConcurrentWriters(t *testing.T, b Backend) {
	s1, reopen := b.Open(t)
	s2 := reopen()
	ctx := t.Context()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if w%2 == 1 {
				s = s2
			}
			for i := range each {
				j := NewJob(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("t%d", w%3), base.Add(time.Duration(i)*time.Millisecond))
				if err := s.Create(ctx, j); err != nil {
					t.Error(err)
					return
				}
				if err := s.AppendEvents(ctx, []job.EventRecord{{JobID: j.ID, Seq: 1, Type: job.EventStarted, Time: base}}); err != nil {
					t.Error(err)
					return
				}
				j.State = job.StateSucceeded
				j.Result = &tools.Result{OK: true, Content: j.ID}
				if err := s.Update(ctx, j); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, tenant := range []string{"t0", "t1", "t2"} {
		cursor := ""
		for {
			jobs, next, err := s1.List(ctx, tenant, job.ListFilter{Limit: 500, Cursor: cursor})
			must(t, err)
			for _, j := range jobs {
				if j.State != job.StateSucceeded || j.Result == nil || j.Result.Content != j.ID {
					t.Fatalf("job %s: %+v", j.ID, j)
				}
			}
			n += len(jobs)
			if next == "" {
				break
			}
			cursor = next
		}
	}
	if n != writers*each {
		t.Fatalf("%d jobs recorded, want %d", n, writers*each)
	}
}

func testReopen(t *testing.T, b Backend) {
	s, reopen := b.Open(t)
	ctx := t.Context()
	j := NewJob("j1", "acme", base)
	j.IdempotencyKey = "k"
	must(t, s.Create(ctx, j))
	must(t, s.CreateSession(ctx, newSession("s1", "acme", base)))
	s2 := reopen()
	got, err := s2.GetByIdempotencyKey(ctx, "acme", "k")
	must(t, err)
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("after reopen: %+v", got)
	}
	if _, err := s2.GetSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
}

// An unusable database fails writes with ErrStoreUnavailable (503 for new
// work) and records nothing of them; once it is back, writes succeed.
func testUnavailable(t *testing.T, b Backend) {
	if b.Break == nil {
		t.Skip("backend cannot be broken")
	}
	s, brk, restore := b.Break(t)
	ctx := t.Context()
	must(t, s.Create(ctx, NewJob("before", "acme", base)))
	brk()
	// Writes large enough to need new space (a full SQLite fails only
	// those).
	big := strings.Repeat("z", 64<<10)
	during := NewJob("during", "acme", base)
	during.Args = json.RawMessage(`{"text":"` + big + `"}`)
	wantIs(t, "Create while unavailable", s.Create(ctx, during), job.ErrStoreUnavailable)
	sd := newSession("s-during", "acme", base)
	sd.Image = big
	wantIs(t, "AppendEvents while unavailable", s.AppendEvents(ctx, []job.EventRecord{{JobID: "before", Seq: 1, Type: job.EventStdout, Time: base, Data: big}}), job.ErrStoreUnavailable)
	wantIs(t, "CreateSession while unavailable", s.CreateSession(ctx, sd), job.ErrStoreUnavailable)
	bd := NewBatch("tc_during", "acme", base, "j_during")
	bd.FinalAnswer = big
	wantIs(t, "CreateBatch while unavailable", s.CreateBatch(ctx, bd), job.ErrStoreUnavailable)
	restore()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = s.Create(ctx, NewJob("after", "acme", base)); err == nil {
			break
		}
	}
	must(t, err)
	_, err = s.Get(ctx, "during")
	wantIs(t, "job of a failed write", err, job.ErrNotFound)
	_, err = s.GetSession(ctx, "s-during")
	wantIs(t, "session of a failed write", err, job.ErrNotFound)
	_, err = s.GetBatch(ctx, "tc_during")
	wantIs(t, "batch of a failed write", err, job.ErrNotFound)
	if evs, err := s.ListEvents(ctx, "before", 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("events of a failed write: %d, %v", len(evs), err)
	}
	if _, err := s.Get(ctx, "before"); err != nil {
		t.Fatal(err)
	}
}
