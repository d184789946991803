package workspace

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkCreateRelease measures a workspace's life (create, one small
// file, release) on its own filesystem, with and without the read-only
// view, and formatted by mke2fs for each workspace instead of copied from
// the template ("fs-mkfs"), interleaved with the baseline: a plain
// directory (MkdirAll, RemoveAll), as before workspaces were bounded.
//
//	go test -run '^$' -bench CreateRelease -benchtime 100x ./internal/workspace/
func BenchmarkCreateRelease(b *testing.B) {
	needRoot(b)
	plain, err := New(Options{Root: b.TempDir(), Plain: true})
	if err != nil {
		b.Fatal(err)
	}
	fs, err := New(Options{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	mkfs, err := New(Options{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	mkfs.fs.tmpl.uncached = true
	l := Limits{Bytes: DefaultBytes, Inodes: DefaultInodes}
	var total, create, release [4]time.Duration
	run := func(k int, m *Manager, ro bool, i int) {
		t0 := time.Now()
		w, err := m.Create(b.Context(), filepath.Join(m.Root(), "w"+strconv.Itoa(i)), l, ro)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.Dir, "a"), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := w.Release(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		create[k] += t1.Sub(t0)
		release[k] += t2.Sub(t1)
		total[k] += t2.Sub(t0)
	}
	for i := 0; b.Loop(); i++ {
		run(0, plain, false, i)
		run(1, fs, false, i)
		run(2, fs, true, i)
		run(3, mkfs, false, i)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	for k, name := range []string{"dir", "fs", "fs+ro", "fs-mkfs"} {
		b.ReportMetric(ms(create[k]), name+"-create-ms/op")
		b.ReportMetric(ms(release[k]), name+"-release-ms/op")
		b.ReportMetric(ms(total[k]), name+"-ms/op")
	}
}
