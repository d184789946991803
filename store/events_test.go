package store

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

func finish(t *testing.T, s *SQLite, j *job.Job, at time.Time, res *tools.Result) {
	t.Helper()
	j.State, j.FinishedAt, j.Result = job.StateSucceeded, &at, res
	if err := s.Update(t.Context(), j); err != nil {
		t.Fatal(err)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	ctx := t.Context()
	for _, id := range []string{"j1", "j2"} {
		if err := s.Create(ctx, newJob(id, "acme", base)); err != nil {
			t.Fatal(err)
		}
	}
	// One batch mixes jobs; data may split a UTF-8 sequence.
	var batch []job.EventRecord
	for i := 1; i <= 600; i++ {
		batch = append(batch, job.EventRecord{JobID: "j1", Seq: i, Type: job.EventStdout, Time: base.Add(time.Duration(i)), Data: fmt.Sprintf("line %d\n", i)})
	}
	batch = append(batch,
		job.EventRecord{JobID: "j2", Seq: 1, Type: job.EventQueued, Time: base},
		job.EventRecord{JobID: "j2", Seq: 2, Type: job.EventStderr, Time: base, Data: "\xe2\x82"})
	if err := s.AppendEvents(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// A retried batch keeps what was recorded.
	if err := s.AppendEvents(ctx, []job.EventRecord{{JobID: "j2", Seq: 2, Type: job.EventStderr, Time: base, Data: "other"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListEvents(ctx, "j2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, batch[600:]) {
		t.Fatalf("j2 events %+v, want %+v", got, batch[600:])
	}
	// Pages in seq order, default 256, at most 1000.
	var all []job.EventRecord
	for after := 0; ; {
		page, err := s.ListEvents(ctx, "j1", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 256 {
			t.Fatalf("page of %d events", len(page))
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].Seq
	}
	if !reflect.DeepEqual(all, batch[:600]) {
		t.Fatalf("j1 events: %d, first %+v", len(all), all[0])
	}
	if page, _ := s.ListEvents(ctx, "j1", 0, 5000); len(page) != 600 {
		t.Fatalf("limit 5000 gave %d", len(page))
	}
	if page, _ := s.ListEvents(ctx, "j1", 598, 10); len(page) != 2 || page[0].Seq != 599 {
		t.Fatalf("after 598: %+v", page)
	}
	if page, err := s.ListEvents(ctx, "nope", 0, 0); err != nil || len(page) != 0 {
		t.Fatalf("events of no job: %v %v", page, err)
	}
	// A job that does not exist refuses the whole batch.
	err = s.AppendEvents(ctx, []job.EventRecord{{JobID: "j1", Seq: 1000, Type: job.EventStdout, Time: base}, {JobID: "ghost", Seq: 1, Type: job.EventQueued, Time: base}})
	if !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("events of a missing job: %v, want ErrNotFound", err)
	}
	if page, _ := s.ListEvents(ctx, "j1", 999, 0); len(page) != 0 {
		t.Fatalf("a refused batch was partly written: %+v", page)
	}
	if err := s.AppendEvents(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Durable across a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if page, _ := s2.ListEvents(ctx, "j1", 0, 1000); len(page) != 600 {
		t.Fatalf("after reopen: %d events", len(page))
	}
}

func TestArtifacts(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	if err := s.Create(ctx, newJob("j1", "acme", base)); err != nil {
		t.Fatal(err)
	}
	png := bytes.Repeat([]byte("\x89PNG\x00"), 1000)
	if err := s.PutArtifact(ctx, "j1", tools.Artifact{Name: "figure-1.png", MimeType: "image/png", Data: png}); err != nil {
		t.Fatal(err)
	}
	a, err := s.GetArtifact(ctx, "j1", "figure-1.png")
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "figure-1.png" || a.MimeType != "image/png" || a.Size != int64(len(png)) || !bytes.Equal(a.Data, png) {
		t.Fatalf("artifact %s %s %d", a.Name, a.MimeType, a.Size)
	}
	if err := s.PutArtifact(ctx, "j1", tools.Artifact{Name: "figure-1.png", MimeType: "image/png"}); !errors.Is(err, job.ErrConflict) {
		t.Fatalf("duplicate name: %v, want ErrConflict", err)
	}
	if err := s.PutArtifact(ctx, "ghost", tools.Artifact{Name: "a", MimeType: "text/plain"}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("artifact of a missing job: %v, want ErrNotFound", err)
	}
	if err := s.PutArtifact(ctx, "j1", tools.Artifact{Name: "empty", MimeType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.GetArtifact(ctx, "j1", "empty"); err != nil || a.Size != 0 || len(a.Data) != 0 {
		t.Fatalf("empty artifact: %+v %v", a, err)
	}
	for _, k := range [][2]string{{"j1", "nope"}, {"ghost", "figure-1.png"}} {
		if _, err := s.GetArtifact(ctx, k[0], k[1]); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("GetArtifact %v: %v, want ErrNotFound", k, err)
		}
	}
}

// TestResultRowHoldsOutputOnce: a sandboxed result's process streams are
// not stored a second time beside Content, and read back exactly.
func TestResultRowHoldsOutputOnce(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	out, errs := strings.Repeat("o", 1<<20), strings.Repeat("e", 1<<20)
	for _, tc := range []struct {
		name string
		res  tools.Result
		max  int // bytes of the stored result
	}{
		{"both streams", tools.FromProcess(tools.ProcessInfo{ExitCode: 1, Stdout: out, Stderr: errs}, nil, time.Second), 2<<20 + 1024},
		{"stdout only", tools.FromProcess(tools.ProcessInfo{Stdout: out}, nil, time.Second), 1<<20 + 1024},
		{"stdout like stderr", tools.FromProcess(tools.ProcessInfo{Stdout: "x\n", Stderr: "x\n"}, nil, time.Second), 1024},
		{"not a prefix: kept as is", tools.Result{OK: true, Content: "value", Process: &tools.ProcessInfo{Stdout: "other"}}, 1024},
		{"no process", tools.Result{OK: true, Content: out}, 1<<20 + 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob("j-"+strings.ReplaceAll(tc.name, " ", "-"), "acme", base)
			if err := s.Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			res := tc.res
			finish(t, s, j, base.Add(time.Second), &res)
			got, err := s.Get(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Result, &res) {
				t.Fatalf("result read back differs: content %d bytes, process %+v", len(got.Result.Content), got.Result.Process != nil)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, `SELECT LENGTH(CAST(result AS BLOB)) FROM jobs WHERE id = ?`, j.ID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > tc.max {
				t.Fatalf("stored result %d bytes, want at most %d", n, tc.max)
			}
		})
	}
}

func TestDeleteFinishedJobs(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	big := strings.Repeat("x", 64<<10)
	mk := func(id string, finished time.Duration, state job.State, guarded bool) {
		t.Helper()
		j := newJob(id, "acme", base)
		if guarded {
			j.Guard = &job.GuardRecord{Outcome: policy.OutcomeAllow, Spend: []policy.Spend{{Tenant: "acme", Key: "budgets[0]", Units: 1}}}
		}
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		if state.Terminal() {
			at := base.Add(finished)
			j.State, j.FinishedAt, j.Result = state, &at, &tools.Result{OK: true, Content: big}
			if err := s.Update(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AppendEvents(ctx, []job.EventRecord{{JobID: id, Seq: 1, Type: job.EventStdout, Time: base, Data: big}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutArtifact(ctx, id, tools.Artifact{Name: "a.png", MimeType: "image/png", Data: []byte(big)}); err != nil {
			t.Fatal(err)
		}
	}
	mk("old1", time.Minute, job.StateSucceeded, false)
	mk("old2", 2*time.Minute, job.StateFailed, false)
	mk("old3", 3*time.Minute, job.StateCancelled, false)
	mk("guarded", 30*time.Second, job.StateSucceeded, true)
	mk("recent", time.Hour, job.StateSucceeded, false)
	mk("running", 0, job.StateRunning, false)
	if err := s.CreateApproval(ctx, &job.Approval{ID: "apr1", Tenant: "acme", JobID: "old1", Tool: "echo", State: job.ApprovalApproved, CreatedAt: base, ExpiresAt: base}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cutoff := base.Add(10 * time.Minute)
	// Batches, earliest finished first; the guarded job's spend is recent
	// enough to be kept.
	d, err := s.DeleteFinishedJobs(ctx, cutoff, base, 2)
	if err != nil || d.Jobs != 2 || d.Bytes < 6*(64<<10) {
		t.Fatalf("first batch: %+v %v", d, err)
	}
	for _, id := range []string{"old1", "old2"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("%s not deleted: %v", id, err)
		}
		if evs, _ := s.ListEvents(ctx, id, 0, 0); len(evs) != 0 {
			t.Fatalf("events of %s left", id)
		}
		if _, err := s.GetArtifact(ctx, id, "a.png"); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("artifact of %s left: %v", id, err)
		}
	}
	if _, err := s.GetApproval(ctx, "apr1"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("approval of a deleted job left: %v", err)
	}
	d, err = s.DeleteFinishedJobs(ctx, cutoff, base, 2)
	if err != nil || d.Jobs != 1 {
		t.Fatalf("second batch: %+v %v", d, err)
	}
	if d, err = s.DeleteFinishedJobs(ctx, cutoff, base, 2); err != nil || d.Jobs != 0 || d.Bytes != 0 {
		t.Fatalf("nothing left to delete: %+v %v", d, err)
	}
	for _, id := range []string{"guarded", "recent", "running"} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("%s deleted: %v", id, err)
		}
	}
	// Past the guard lookback the guarded job goes too.
	if d, err = s.DeleteFinishedJobs(ctx, cutoff, base.Add(time.Second), 10); err != nil || d.Jobs != 1 {
		t.Fatalf("guarded job past the lookback: %+v %v", d, err)
	}
	after, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Bytes > before.Bytes-4*2*(64<<10) || after.FileBytes <= 0 {
		t.Fatalf("size before %+v after %+v", before, after)
	}
}

func TestCompact(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	ctx := t.Context()
	var mode int
	if err := s.db.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum %d %v, want 2 (incremental)", mode, err)
	}
	if freed, err := s.Compact(ctx); err != nil || freed != 0 {
		t.Fatalf("compact of a fresh store: %d %v", freed, err)
	}
	big := strings.Repeat("y", 1<<20)
	for i := range 16 {
		j := newJob(fmt.Sprintf("j%02d", i), "acme", base)
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		finish(t, s, j, base.Add(time.Duration(i)*time.Second), &tools.Result{OK: true, Content: big})
	}
	full, _ := s.Size(ctx)
	if d, err := s.DeleteFinishedJobs(ctx, base.Add(time.Hour), base, 100); err != nil || d.Jobs != 16 {
		t.Fatalf("delete: %+v %v", d, err)
	}
	freed, err := s.Compact(ctx)
	if err != nil || freed < 12<<20 {
		t.Fatalf("compact gave back %d bytes, %v", freed, err)
	}
	// The file shrinks at a checkpoint (the background one may hold the
	// checkpoint lock a moment).
	for i := 0; ; i++ {
		var busy, frames, done int
		if err := s.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if i == 100 {
			t.Fatal("checkpoint busy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	small, _ := s.Size(ctx)
	if small.FileBytes > full.FileBytes/4 || small.Bytes > 1<<20 {
		t.Fatalf("after compaction %+v, full %+v", small, full)
	}
	// A database made before incremental vacuum is converted at Open.
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"PRAGMA auto_vacuum=NONE", "VACUUM"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.QueryRow("PRAGMA auto_vacuum").Scan(&mode)
	db.Close()
	if mode != 0 {
		t.Fatalf("could not make an old-style database (auto_vacuum %d)", mode)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.db.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("after reopening an old database: auto_vacuum %d %v", mode, err)
	}
}

// TestUpdateWithEvents: the job's update and its events commit together;
// a job that does not exist is ErrNotFound and none of its events is
// written; a recorded event is kept as it was.
func TestUpdateWithEvents(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	j := newJob("j1", "acme", base)
	if err := s.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	first := job.EventRecord{JobID: "j1", Seq: 1, Type: job.EventQueued, Time: base}
	if err := s.AppendEvents(ctx, []job.EventRecord{first}); err != nil {
		t.Fatal(err)
	}
	fin := base.Add(time.Second)
	j.State, j.FinishedAt, j.Result = job.StateSucceeded, &fin, &tools.Result{OK: true, Content: "done"}
	evs := []job.EventRecord{
		{JobID: "j1", Seq: 1, Type: job.EventQueued, Time: base, Data: "again"}, // kept as recorded
		{JobID: "j1", Seq: 2, Type: job.EventStdout, Time: fin, Data: "out"},
		{JobID: "j1", Seq: 3, Type: job.EventFinished, Time: fin},
	}
	if err := s.UpdateWithEvents(ctx, j, evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "j1")
	if err != nil || got.State != job.StateSucceeded || got.Result.Content != "done" {
		t.Fatalf("job after UpdateWithEvents: %+v, %v", got, err)
	}
	stored, err := s.ListEvents(ctx, "j1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]job.EventRecord{first}, evs[1:]...); !reflect.DeepEqual(stored, want) {
		t.Errorf("events %+v, want %+v", stored, want)
	}

	ghost := newJob("ghost", "acme", base)
	err = s.UpdateWithEvents(ctx, ghost, []job.EventRecord{{JobID: "ghost", Seq: 1, Type: job.EventFinished, Time: fin}})
	if !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("UpdateWithEvents of a missing job: %v, want ErrNotFound", err)
	}
	if evs, err := s.ListEvents(ctx, "ghost", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("events of the missing job: %v, %v", evs, err)
	}
	if err := s.Update(ctx, ghost); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Update of a missing job: %v, want ErrNotFound", err)
	}
}
