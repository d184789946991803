package store

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

// TestWALBoundedUnderSustainedWrites writes without a pause while readers
// read, the load under which the WAL never restarted: a passive
// checkpoint cannot finish while frames keep coming, so the WAL (and the
// database file, which shrinks only when a checkpoint finishes) grew with
// everything written (199 MB in a profile; the soak test's store 138 →
// 184 MB in CI). The checkpointer must bring the WAL back to about its
// restart size however the load runs.
func TestWALBoundedUnderSustainedWrites(t *testing.T) {
	const limit = 8 << 20 // the WAL size that forces a checkpoint here
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, err := open(path, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	big := json.RawMessage(`{"text":"` + strings.Repeat("x", 64<<10) + `"}`)
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer: never pauses
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			j := newJob(fmt.Sprintf("j%d", i), "acme", base)
			j.Args = big
			if err := s.Create(ctx, j); err != nil {
				t.Error(err)
				return
			}
			written.Add(int64(len(big)))
		}
	}()
	for r := 0; r < 2; r++ { // readers: always one snapshot open
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := s.List(ctx, "acme", job.ListFilter{Limit: 20}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Written: 6*limit of job rows. Without a forced checkpoint the WAL
	// file only grew, holding about everything written; with it, it is
	// emptied each time it reaches limit (unless a reader holds it longer
	// than a forced checkpoint waits: then it is tried again later).
	var shrank int
	var maxWAL int64
	var last int64
	for written.Load() < 6*limit && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if fi, err := os.Stat(path + "-wal"); err == nil {
			if fi.Size() < last {
				shrank++
			}
			last = fi.Size()
			maxWAL = max(maxWAL, fi.Size())
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("wrote %d MiB; the WAL was emptied %d times, reached %d MiB at most", written.Load()>>20, shrank, maxWAL>>20)
	if shrank < 2 {
		t.Errorf("the WAL was emptied %d times while %d MiB were written (forced at %d MiB), want at least 2", shrank, written.Load()>>20, limit>>20)
	}
	if maxWAL > 4*limit {
		t.Errorf("the WAL reached %d MiB (forced at %d MiB)", maxWAL>>20, limit>>20)
	}
}
