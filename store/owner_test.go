package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// One sandboxd serves a Postgres database: a second is refused naming the
// first; after the first closes, the second may; a holder whose lock was
// taken from it (its connection cut, another process locked first) is
// told to stop.
func TestPostgresOwner(t *testing.T) {
	t.Parallel()
	old := ownerCheckInterval
	ownerCheckInterval = time.Second
	t.Cleanup(func() { ownerCheckInterval = old })
	url := pgtest.Shared(t).NewDatabase(t)
	open := func() *Postgres {
		s, err := OpenPostgres(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b, c := open(), open(), open()
	lost := make(chan error, 1)
	if err := a.HoldOwner(t.Context(), func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	err := b.HoldOwner(t.Context(), nil)
	if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), "sandboxd owner") {
		t.Fatalf("second owner: %v, want ErrOwned naming the holder", err)
	}
	a.Close()
	if err := b.HoldOwner(t.Context(), nil); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}

	// c's connection is cut; b takes the lock before c reconnects.
	b.Close()
	if err := c.HoldOwner(t.Context(), func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Cut c's lock connection and lock in the same statement, so c cannot
	// take it back first.
	var got bool
	if err := conn.QueryRow(t.Context(), `SELECT bool_and(pg_terminate_backend(pid, 5000)) AND pg_try_advisory_lock($1)
		FROM pg_stat_activity WHERE application_name LIKE 'sandboxd owner%' AND datname = current_database()`,
		int64(pgOwnerLock)).Scan(&got); err != nil || !got {
		t.Fatalf("take the lock from c: %v %v", got, err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, ErrOwned) {
			t.Fatalf("onLost: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("c was not told it lost the lock")
	}
}
