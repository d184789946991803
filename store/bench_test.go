package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// BenchmarkSessionCallWrites is the store's share of a short session
// call, one after another (nothing to group): the job's insert, then its
// finished state with its events (queued, started, output, finished: a
// short call's events reach the store with its finished state). SANDBOXD_BENCH_DROP_INDEXES (comma-separated) drops
// indexes first, to weigh each one's cost.
func BenchmarkSessionCallWrites(b *testing.B) {
	path := filepath.Join(b.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	if d := os.Getenv("SANDBOXD_BENCH_DROP_INDEXES"); d != "" {
		for _, ix := range strings.Split(d, ",") {
			if _, err := s.w.ExecContext(ctx, "DROP INDEX "+ix); err != nil {
				b.Fatal(err)
			}
		}
	}
	t0 := time.Now().UTC()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		j := newJob(fmt.Sprintf("job_%09d", i), "acme", now)
		j.Tool, j.Args, j.SessionID, j.Runner = "python_repl", []byte(`{"code":"print(1)"}`), "ses_1", "local"
		if err := s.Create(ctx, j); err != nil {
			b.Fatal(err)
		}
		fin := now.Add(time.Millisecond)
		j.State, j.StartedAt, j.FinishedAt, j.Attempts = job.StateSucceeded, &now, &fin, 1
		j.Result = &tools.Result{OK: true, Content: "1\n"}
		if err := s.UpdateWithEvents(ctx, j, []job.EventRecord{
			{JobID: j.ID, Seq: 1, Type: job.EventQueued, Time: now},
			{JobID: j.ID, Seq: 2, Type: job.EventStarted, Time: now},
			{JobID: j.ID, Seq: 3, Type: job.EventStdout, Time: now, Data: "1\n"},
			{JobID: j.ID, Seq: 4, Type: job.EventFinished, Time: fin},
		}); err != nil {
			b.Fatal(err)
		}
	}
}
