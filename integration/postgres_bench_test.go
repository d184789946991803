//go:build integration

package integration

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// benchPostgres starts a Postgres with its durability settings back on
// (fsync, full pages; the tests' server has them off) and
// pg_stat_statements, and returns a database's URL.
func benchPostgres(b *testing.B) string {
	pg := pgtest.Start(b, "fsync = on", "full_page_writes = on",
		"shared_preload_libraries = 'pg_stat_statements'", "pg_stat_statements.track = all")
	url := pg.NewDatabase(b)
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	return url
}

// pgStatFlush is how long Postgres 15's backends may hold their
// statistics before reporting them (PGSTAT_IDLE_INTERVAL, 10 s), with a
// margin.
const pgStatFlush = 11 * time.Second

// pgCost is the database's own account of a stretch of work.
type pgCost struct {
	statements int64   // statements executed (round trips, as the store sends one per statement)
	execMS     float64 // their execution time in the server
	commits    int64   // transactions committed
}

func readPgCost(b *testing.B, url string) pgCost {
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	var pc pgCost
	if err := c.QueryRow(context.Background(), `SELECT COALESCE(SUM(calls), 0)::BIGINT, COALESCE(SUM(total_exec_time), 0)
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat%'`).Scan(&pc.statements, &pc.execMS); err != nil {
		b.Fatal(err)
	}
	if err := c.QueryRow(context.Background(), `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&pc.commits); err != nil {
		b.Fatal(err)
	}
	return pc
}

// calcThroughput sends b.N calculator calls from 200 concurrent clients,
// client i to servers[i % len(servers)] (replicas of one database), and
// reports calls per second.
func calcThroughput(b *testing.B, servers ...*server) {
	tr := &http.Transport{MaxIdleConns: 400, MaxIdleConnsPerHost: 400}
	client := &http.Client{Transport: tr}
	const workers = 200
	var wg sync.WaitGroup
	for w := range workers { // warm the connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			apiCall(client, servers[w%len(servers)].URL, "calculator", map[string]any{"expression": "1+1"})
		}()
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	var mu sync.Mutex
	next, firstErr := 0, error(nil)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := servers[w%len(servers)]
			for {
				mu.Lock()
				if next >= b.N || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				if err := apiCall(client, s.URL, "calculator", map[string]any{"expression": "2**64 // 3 + sqrt(2)"}); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkStoreBackends compares the SQLite and Postgres stores through
// sandboxd, side by side in one run: calculator throughput at 200
// concurrent clients on each; at concurrency 1, calls interleaved between
// the two servers (the same moments of machine load for both), the
// median of each and Postgres's added median; and the store's cost per job
// from Postgres's own statistics (pg_stat_statements: statements and
// server execution time; pg_stat_database: commits). The throughput is
// also measured with two replicas on the one database, the clients split
// between them (they share this machine's 2 cores with Postgres and the
// clients).
//
//	go test -tags integration -run '^$' -bench BenchmarkStoreBackends -benchtime=200x ./integration/
func BenchmarkStoreBackends(b *testing.B) {
	url := benchPostgres(b)
	lite := startServer(b, "")
	pg := startServerArgs(b, "", "--store", url)
	pg2 := startServerArgs(b, "", "--store", url)

	b.Run("Calculator200/sqlite", func(b *testing.B) { calcThroughput(b, lite) })
	b.Run("Calculator200/postgres", func(b *testing.B) { calcThroughput(b, pg) })
	b.Run("Calculator200/postgres-2-replicas", func(b *testing.B) { calcThroughput(b, pg, pg2) })

	b.Run("Calculator1Interleaved", func(b *testing.B) {
		client := &http.Client{}
		call := func(s *server) (time.Duration, error) {
			t0 := time.Now()
			err := apiCall(client, s.URL, "calculator", map[string]any{"expression": "2**64 // 3 + sqrt(2)"})
			return time.Since(t0), err
		}
		for _, s := range []*server{lite, pg} { // warm up
			if _, err := call(s); err != nil {
				b.Fatal(err)
			}
		}
		var dl, dp []time.Duration
		b.ResetTimer()
		for i := range b.N {
			order := []*server{lite, pg}
			if i%2 == 1 {
				order = []*server{pg, lite}
			}
			for _, s := range order {
				d, err := call(s)
				if err != nil {
					b.Fatal(err)
				}
				if s == lite {
					dl = append(dl, d)
				} else {
					dp = append(dp, d)
				}
			}
		}
		b.StopTimer()
		slices.Sort(dl)
		slices.Sort(dp)
		ml, mp := dl[len(dl)/2], dp[len(dp)/2]
		b.ReportMetric(float64(ml.Microseconds())/1000, "sqlite-p50-ms")
		b.ReportMetric(float64(mp.Microseconds())/1000, "postgres-p50-ms")
		b.ReportMetric(float64((mp-ml).Microseconds())/1000, "added-p50-ms")
	})

	b.Run("CostPerJob/postgres", func(b *testing.B) {
		client := &http.Client{}
		// Backends report their transaction counts to pg_stat_database
		// within pgStatFlush (at the latest when idle that long): wait
		// for earlier work's to land before, and this work's after.
		time.Sleep(pgStatFlush)
		before := readPgCost(b, url)
		b.ResetTimer()
		for range b.N {
			if err := apiCall(client, pg.URL, "calculator", map[string]any{"expression": "1+2"}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		time.Sleep(pgStatFlush) // the last event flush, and the statistics
		after := readPgCost(b, url)
		n := float64(b.N)
		// The first reading's two transactions are inside the window:
		// subtract them (its statements are not counted: they read
		// pg_stat_*).
		b.ReportMetric(float64(after.statements-before.statements)/n, "statements/job")
		b.ReportMetric((after.execMS-before.execMS)/n, "db-ms/job")
		b.ReportMetric(float64(after.commits-before.commits-2)/n, "commits/job")
		if d := (after.execMS - before.execMS) / n; d > 0 {
			b.ReportMetric(1000/d, "jobs/s-db-bound")
		}
	})
}
