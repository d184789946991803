//go:build integration

package integration

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// TestSoakFloodRetention floods stdout and stderr from many jobs through a
// real sandboxd (local runner) and samples the daemon's RSS and the size of
// its data (database, WAL, artifacts) after every round. With retention
// configured both must stay flat: memory is bounded in bytes (no per-job
// history kept in memory past its cap) and the store is trimmed to
// retention.max_bytes and compacted.
//
// SANDBOXD_SOAK_BASELINE=1 runs the same load without the retention block
// and without the assertions, to measure a build that has no retention (the
// README's before/after numbers were measured this way).
func TestSoakFloodRetention(t *testing.T) {
	baseline := os.Getenv("SANDBOXD_SOAK_BASELINE") == "1"
	const (
		rounds    = 12
		perRound  = 8
		floodSize = 24 << 20 // bytes per stream per job, far above the 1 MiB cap
		maxBytes  = 48 << 20
	)
	cfg := "queue: {size: 64, workers: 4}\n"
	if !baseline {
		cfg += fmt.Sprintf("retention: {max_age: 1h, max_bytes: %d, interval: 1s}\n", maxBytes)
	}
	s := startServer(t, cfg)
	pid := s.cmd.Process.Pid
	cmd := fmt.Sprintf("yes 'out out out out out out out out out out' | head -c %d; yes 'err err err err err err err err' | head -c %d >&2", floodSize, floodSize)

	type sample struct {
		jobs                int
		rss, data, wal, row int64
	}
	var samples []sample
	start := time.Now()
	for r := 0; r < rounds; r++ {
		ids := make([]string, 0, perRound)
		for i := 0; i < perRound; i++ {
			ids = append(ids, s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": cmd}}))
		}
		for _, id := range ids {
			j := s.waitTerminal(id, 2*time.Minute)
			if j.Result == nil || !strings.Contains(j.Result.Content, "out out") {
				t.Fatalf("flood job %s: %s %s", id, j.State, j.Reason)
			}
		}
		if !baseline {
			time.Sleep(1500 * time.Millisecond) // one retention pass
		}
		samples = append(samples, sample{jobs: (r + 1) * perRound, rss: rssBytes(t, pid), data: dirBytes(t, s.DataDir), wal: fileBytes(filepath.Join(s.DataDir, "sandboxd.db-wal")), row: maxRowBytes(t, s.DataDir)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "soak (%s, %s): jobs, RSS MiB, store MiB (database, WAL and artifacts), of which WAL MiB, largest job row MiB\n", map[bool]string{true: "baseline, no retention", false: "retention max_bytes 48 MiB"}[baseline], time.Since(start).Round(time.Second))
	for _, sm := range samples {
		fmt.Fprintf(&b, "  %3d  %7.1f  %7.1f  %7.1f  %5.2f\n", sm.jobs, float64(sm.rss)/(1<<20), float64(sm.data)/(1<<20),
			float64(sm.wal)/(1<<20), float64(sm.row)/(1<<20))
	}
	t.Log(b.String())
	if baseline {
		return
	}
	last := samples[len(samples)-1]
	if db := last.data - last.wal; db > maxBytes*5/4 {
		t.Errorf("database %d bytes after %d jobs, retention.max_bytes is %d", db, last.jobs, maxBytes)
	}
	// Flat from the third round on: the database stays within 16 MiB of
	// its size then, and the WAL at most the 16 MiB it is cut back to (a
	// checkpoint is forced from 64 MiB, and one that copied everything
	// empties a WAL above 16 MiB: before, the WAL held a round of writes,
	// 50-70 MiB, and under load never restarted, 138 -> 184 MiB in CI);
	// RSS within 64 MiB of the second round's (the first rounds grow the
	// heap to its working size).
	if ref := samples[2].data - samples[2].wal; last.data-last.wal > ref+16<<20 {
		t.Errorf("database grew from %d to %d bytes", ref, last.data-last.wal)
	}
	for _, sm := range samples[2:] {
		if sm.wal > 16<<20+1<<20 {
			t.Errorf("WAL %d bytes after %d jobs", sm.wal, sm.jobs)
		}
	}
	if ref := samples[1].rss; last.rss > ref+64<<20 {
		t.Errorf("RSS grew from %d to %d bytes", ref, last.rss)
	}
	// 1 MiB per stream: the row holds each stream once (2 MiB), not
	// twice beside the process streams (4.1 MiB before).
	if last.row > 2<<20+64<<10 {
		t.Errorf("largest job row %d bytes", last.row)
	}
}

// maxRowBytes is the largest job row in the database (read-only, beside
// the live writer: WAL allows it).
func maxRowBytes(t *testing.T, dir string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "sandboxd.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n sql.NullInt64
	if err := db.QueryRow(`SELECT MAX(LENGTH(CAST(args AS BLOB)) + IFNULL(LENGTH(CAST(result AS BLOB)), 0) + IFNULL(LENGTH(CAST(guard AS BLOB)), 0) + IFNULL(LENGTH(CAST(egress AS BLOB)), 0)) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n.Int64
}

func fileBytes(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// rssBytes reads VmRSS of pid.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// dirBytes is the size of the database files and the artifacts under dir
// (workspaces and sandbox state are not the store).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, pat := range []string{"sandboxd.db*", "artifacts"} {
		ms, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, m := range ms {
			filepath.Walk(m, func(_ string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					n += fi.Size()
				}
				return nil
			})
		}
	}
	return n
}
