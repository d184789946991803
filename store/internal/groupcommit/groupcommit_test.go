package groupcommit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// memTx is a transaction of a map: writes apply at Commit.
type memTx struct{ writes []string }

type memDB struct {
	mu        sync.Mutex
	committed []string
	txs       int
	block     chan struct{} // non-nil: Begin waits for it
}

func (d *memDB) backend() Backend[*memTx] {
	return Backend[*memTx]{
		Begin: func(ctx context.Context) (*memTx, error) {
			if d.block != nil {
				<-d.block
			}
			return &memTx{}, nil
		},
		Commit: func(tx *memTx) error {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.committed = append(d.committed, tx.writes...)
			d.txs++
			return nil
		},
		Rollback: func(tx *memTx) error { return nil },
	}
}

var errBad = errors.New("bad write")

func put(v string) Write[*memTx] {
	return func(_ context.Context, tx *memTx) error {
		if v == "bad" {
			return errBad
		}
		tx.writes = append(tx.writes, v)
		return nil
	}
}

// Writes queued while a transaction runs commit together; a failing write
// gets its own error and the others of its batch still commit.
func TestBatchesAndSplits(t *testing.T) {
	d := &memDB{block: make(chan struct{})}
	g := New(d.backend(), 100, time.Minute)
	defer g.Close()
	ctx := t.Context()
	first := make(chan error, 1)
	go func() { first <- g.Do(ctx, put("first")) }() // holds the committer in Begin
	for g.Stats().Batches == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		v := string(rune('a' + i))
		if i == 4 {
			v = "bad"
		}
		wg.Go(func() { errs[i] = g.Do(ctx, put(v)) })
	}
	for g.queued() < len(errs) {
		time.Sleep(time.Millisecond)
	}
	close(d.block)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if (i == 4) != errors.Is(err, errBad) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	slices.Sort(d.committed)
	if want := []string{"a", "b", "c", "d", "f", "first", "g", "h", "i", "j"}; !slices.Equal(d.committed, want) {
		t.Errorf("committed %v, want %v", d.committed, want)
	}
	st := g.Stats()
	if st.Batches != 2 || st.Fallbacks != 1 || st.Writes != 11 {
		t.Errorf("stats %+v, want 2 batches (one split), 11 writes", st)
	}
}

// A write whose caller gave up while it was queued never runs; one the
// committer took is waited for.
func TestAbandoned(t *testing.T) {
	d := &memDB{block: make(chan struct{})}
	g := New(d.backend(), 100, time.Minute)
	defer g.Close()
	go g.Do(t.Context(), put("holder"))
	for g.Stats().Batches == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, put("gone")) }()
	for g.queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Do = %v", err)
	}
	close(d.block)
	if err := g.Do(t.Context(), put("after")); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(d.committed, "gone") {
		t.Errorf("an abandoned write was committed: %v", d.committed)
	}
}

func TestClosed(t *testing.T) {
	d := &memDB{}
	g := New(d.backend(), 4, time.Minute)
	if err := g.Do(t.Context(), put("x")); err != nil {
		t.Fatal(err)
	}
	g.Close()
	g.Close()
	if err := g.Do(t.Context(), put("y")); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v", err)
	}
}

// goid is the current goroutine's id, from its stack header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// A write with no commit under way is committed on its caller's
// goroutine: no hand-off to another goroutine and back.
func TestIdleWriteOnCaller(t *testing.T) {
	d := &memDB{}
	g := New(d.backend(), 8, time.Minute)
	defer g.Close()
	for range 3 {
		caller, ran := goid(), ""
		if err := g.Do(t.Context(), func(_ context.Context, tx *memTx) error {
			ran = goid()
			tx.writes = append(tx.writes, "w")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if ran != caller {
			t.Fatalf("the write ran on goroutine %s, its caller is %s", ran, caller)
		}
	}
	if st := g.Stats(); st.Batches != 3 || st.Writes != 3 {
		t.Errorf("stats %+v", st)
	}
}

// A committer whose own write is in returns although others wait: they
// are committed behind it, and nothing is lost or committed twice under
// many concurrent callers.
func TestCommitterReturns(t *testing.T) {
	d := &memDB{block: make(chan struct{})}
	g := New(d.backend(), 2, time.Minute)
	first := make(chan error, 1)
	go func() { first <- g.Do(t.Context(), put("first")) }()
	for g.Stats().Batches == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() { _ = g.Do(t.Context(), put(fmt.Sprint("w", i))) })
	}
	for g.queued() < 5 {
		time.Sleep(time.Millisecond)
	}
	// The first committer's write is the first batch: it returns while
	// the five behind it still wait (three more batches of at most 2).
	d.block <- struct{}{}
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the committer did not return once its own write was committed")
	}
	d.mu.Lock()
	got := slices.Clone(d.committed)
	d.mu.Unlock()
	if !slices.Equal(got, []string{"first"}) {
		t.Fatalf("committed %v when the first committer returned", got)
	}
	for range 3 {
		d.block <- struct{}{}
	}
	wg.Wait()
	g.Close()
	if len(d.committed) != 6 {
		t.Fatalf("committed %v", d.committed)
	}

	d2 := &memDB{}
	g2 := New(d2.backend(), 16, time.Minute)
	var wg2 sync.WaitGroup
	for i := range 400 {
		wg2.Go(func() {
			if err := g2.Do(t.Context(), put(fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg2.Wait()
	g2.Close()
	seen := map[string]bool{}
	for _, v := range d2.committed {
		if seen[v] {
			t.Fatalf("%s committed twice", v)
		}
		seen[v] = true
	}
	if len(seen) != 400 {
		t.Fatalf("%d of 400 committed", len(seen))
	}
}
