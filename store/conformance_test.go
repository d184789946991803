package store

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store/pgtest"
	"github.com/sandboxd/sandboxd/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) (job.Store, func() job.Store) {
			path := filepath.Join(t.TempDir(), "sandboxd.db")
			open := func() job.Store {
				s, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			return open(), open
		},
		// Full: no page past the ones the database has now.
		Break: func(t *testing.T) (job.Store, func(), func()) {
			s, _ := openTemp(t)
			pragma := func(q string) {
				if _, err := s.w.ExecContext(t.Context(), q); err != nil {
					t.Fatal(err)
				}
			}
			return s, func() {
				var n int64
				if err := s.w.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&n); err != nil {
					t.Fatal(err)
				}
				pragma("PRAGMA max_page_count = " + strconv.FormatInt(n, 10))
			}, func() { pragma("PRAGMA max_page_count = 4294967294") }
		},
	})
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Shared(t)
	openURL := func(t *testing.T, url string) job.Store {
		s, err := OpenPostgres(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) (job.Store, func() job.Store) {
			url := srv.NewDatabase(t)
			return openURL(t, url), func() job.Store { return openURL(t, url) }
		},
		// Unreachable: a server of its own, stopped and restarted.
		Break: func(t *testing.T) (job.Store, func(), func()) {
			own := pgtest.Start(t)
			s := openURL(t, own.NewDatabase(t))
			return s, own.Stop, func() { own.Restart(t) }
		},
	})
}
