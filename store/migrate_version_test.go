package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// A database migrated by a newer sandboxd is refused, with a message
// naming both versions; the database is left as it was.
func TestSchemaTooNewSQLite(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(path)
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", len(migrations)+1)) {
		t.Fatalf("Open of a newer database: %v, want ErrSchemaTooNew naming the version", err)
	}
}

func TestSchemaTooNewPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	s, err := OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)`, len(pgMigrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = OpenPostgres(t.Context(), url)
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", len(pgMigrations)+1)) {
		t.Fatalf("OpenPostgres of a newer database: %v, want ErrSchemaTooNew naming the version", err)
	}
}

// Replicas starting together on an empty database: the advisory lock
// lets one migrate, the others find the schema done; each version is
// recorded once.
func TestPostgresConcurrentMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenPostgres(t.Context(), url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n, max int
	if err := c.QueryRow(t.Context(), `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != len(pgMigrations) || max != len(pgMigrations) {
		t.Fatalf("schema_migrations: %d rows, max %d; want %d", n, max, len(pgMigrations))
	}
}

// A URL that cannot be reached fails Open with ErrStoreUnavailable and
// never shows the password.
func TestPostgresOpenUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "postgres://sandboxd:hunter2@/db?host=" + filepath.Join(dir, "nosock") + "&connect_timeout=2"
	_, err := OpenPostgres(t.Context(), url)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenPostgres unreachable: %v", err)
	}
	if !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("OpenPostgres unreachable: %v, want store unavailable", err)
	}
}
