package groupcommit

import (
	"context"
	"errors"
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
	for len(g.q) < len(errs) {
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
	for len(g.q) == 0 {
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
