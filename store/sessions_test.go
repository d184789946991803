package store

import (
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

func newSession(id, tenant string, created time.Time) *job.Session {
	return &job.Session{
		ID: id, Tenant: tenant, Image: "img", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileRead},
		Limits: runner.Limits{MemoryBytes: 1 << 20, Timeout: time.Second},
		State:  job.SessionCreating, TTL: time.Hour, IdleTimeout: time.Minute,
		CreatedAt: created, ExpiresAt: created.Add(time.Hour), LastUsedAt: created,
	}
}

func TestSessionRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	ss := newSession("ses_1", "acme", base)
	if err := s.CreateSession(ctx, ss); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, ss); !errors.Is(err, job.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := s.GetSession(ctx, "ses_1")
	if err != nil || !reflect.DeepEqual(got, ss) {
		t.Fatalf("GetSession = %+v, %v; want %+v", got, err, ss)
	}
	open, err := s.ListOpenSessions(ctx)
	if err != nil || len(open) != 1 {
		t.Fatalf("open = %v, %v", open, err)
	}
	closed := base.Add(time.Minute)
	ss.State, ss.Reason, ss.LastUsedAt, ss.ClosedAt = job.SessionClosed, job.SessionReasonIdle, base.Add(time.Second), &closed
	if err := s.UpdateSession(ctx, ss); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, "ses_1"); !reflect.DeepEqual(got, ss) {
		t.Fatalf("after update = %+v, want %+v", got, ss)
	}
	if open, _ := s.ListOpenSessions(ctx); len(open) != 0 {
		t.Fatalf("open after close = %v", open)
	}
	if _, err := s.GetSession(ctx, "nope"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := s.UpdateSession(ctx, newSession("nope", "acme", base)); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	// A job records its session.
	j := newJob("j1", "acme", base)
	j.SessionID = "ses_1"
	if err := s.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "j1"); got.SessionID != "ses_1" {
		t.Fatalf("job session = %q", got.SessionID)
	}
}

func TestListSessionsPaginates(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	for i := range 5 {
		ss := newSession("ses_"+string(rune('a'+i)), "acme", base.Add(time.Duration(i)*time.Second))
		if i == 4 {
			ss.State = job.SessionActive
		}
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSession(ctx, newSession("ses_other", "other", base)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	cursor := ""
	for {
		page, next, err := s.ListSessions(ctx, "acme", job.SessionFilter{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, ss := range page {
			ids = append(ids, ss.ID)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if want := []string{"ses_e", "ses_d", "ses_c", "ses_b", "ses_a"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids = %v, want %v", ids, want)
	}
	active, _, err := s.ListSessions(ctx, "acme", job.SessionFilter{State: job.SessionActive})
	if err != nil || len(active) != 1 || active[0].ID != "ses_e" {
		t.Fatalf("active = %v, %v", active, err)
	}
	if _, _, err := s.ListSessions(ctx, "acme", job.SessionFilter{Cursor: "garbage!"}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// TestMigrateFromV1 opens a database written before sessions existed.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, db, 1, migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, tenant, tool, state, created_at) VALUES ('old', 'acme', 'echo', 'succeeded', 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.Get(ctx, "old")
	if err != nil || j.SessionID != "" || j.Tool != "echo" {
		t.Fatalf("old job = %+v, %v", j, err)
	}
	if err := s.CreateSession(ctx, newSession("ses_new", "acme", base)); err != nil {
		t.Fatal(err)
	}
}
