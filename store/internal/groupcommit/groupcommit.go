// Package groupcommit commits the writes of concurrent callers together:
// one transaction for every write that queued while the previous
// transaction committed. A caller's Do returns once its write is committed
// (or failed), so durability is each write's own; only the cost of the
// commit (the journal's pages, its sync) is shared.
//
// It knows nothing of the backend: a Group is given how to begin, commit
// and roll back a transaction of type Tx (*sql.Tx for SQLite and for a
// Postgres store through database/sql alike). A write that fails inside a
// batch rolls the batch back, and each write of that batch is then run in
// a transaction of its own, so one write's error (a constraint) never
// becomes another's, on a backend where a failed statement aborts the
// whole transaction (Postgres) as on one where it does not (SQLite).
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Backend begins, commits and rolls back transactions of type Tx.
type Backend[Tx any] struct {
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(tx Tx) error
	Rollback func(tx Tx) error
}

// Write is one caller's write inside the batch's transaction.
type Write[Tx any] func(ctx context.Context, tx Tx) error

// Stats counts what a Group did.
type Stats struct {
	Writes, Batches, Fallbacks int64
}

// Group is a queue of writes and at most one committer at a time. The
// committer is a caller: a Do that finds no commit under way commits on
// its own goroutine (its write and whatever queued meanwhile), so a
// write with nothing else going on costs no goroutine hand-off (with a
// committer goroutine, two wake-ups per write). A Do that finds a commit
// under way queues and waits; when the committer's own write is
// committed and more are waiting, a new goroutine takes over so that the
// caller returns at once.
type Group[Tx any] struct {
	b       Backend[Tx]
	max     int
	timeout time.Duration

	mu      sync.Mutex
	q       []*op[Tx]
	leading bool       // a committer is running
	closed  bool       // Close was called: Do refuses
	idle    *sync.Cond // on mu: broadcast when the committer stops

	writes, batches, fallbacks atomic.Int64
}

type op[Tx any] struct {
	w     Write[Tx]
	state atomic.Int32 // opQueued → opTaken (the committer) or opAbandoned (the caller's ctx ended first)
	err   error
	done  chan struct{}
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

// ErrClosed is the error of a Do after Close.
var ErrClosed = errors.New("groupcommit: closed")

// New returns a Group committing at most maxBatch writes per transaction;
// timeout bounds one transaction (its writes and commit).
func New[Tx any](b Backend[Tx], maxBatch int, timeout time.Duration) *Group[Tx] {
	g := &Group[Tx]{b: b, max: max(maxBatch, 1), timeout: timeout}
	g.idle = sync.NewCond(&g.mu)
	return g
}

// Do queues w and returns once the transaction holding it has committed
// (nil) or w failed (its error). When ctx ends while w is still queued, w
// never runs and Do returns ctx's error; once a committer has taken it,
// Do waits for the outcome, so that a nil error always means committed
// and an error never hides a committed write.
func (g *Group[Tx]) Do(ctx context.Context, w Write[Tx]) error {
	o := &op[Tx]{w: w, done: make(chan struct{})}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.q = append(g.q, o)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if lead {
		g.lead(o)
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		<-o.done
		return o.err
	}
}

// queued is the number of writes waiting for a committer.
func (g *Group[Tx]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.q)
}

// Stats returns the counts so far.
func (g *Group[Tx]) Stats() Stats {
	return Stats{Writes: g.writes.Load(), Batches: g.batches.Load(), Fallbacks: g.fallbacks.Load()}
}

// Close waits until what is queued is committed; later Do calls fail
// with ErrClosed.
func (g *Group[Tx]) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.leading {
		g.idle.Wait()
	}
}

// lead commits batches of the queue, in order, until own (nil: nothing of
// its own) is committed and then hands what is left to a new committer,
// or until the queue is empty.
func (g *Group[Tx]) lead(own *op[Tx]) {
	for {
		g.mu.Lock()
		if len(g.q) == 0 {
			g.leading = false
			g.idle.Broadcast()
			g.mu.Unlock()
			return
		}
		if own != nil && isDone(own) {
			g.mu.Unlock()
			go g.lead(nil) // still leading: the caller returns, the rest is committed behind it
			return
		}
		n := min(len(g.q), g.max)
		batch := make([]*op[Tx], n)
		copy(batch, g.q)
		g.q = append(g.q[:0], g.q[n:]...)
		g.mu.Unlock()
		g.commit(batch)
	}
}

func isDone[Tx any](o *op[Tx]) bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// commit runs batch's live writes in one transaction; a failure splits it.
func (g *Group[Tx]) commit(batch []*op[Tx]) {
	live := batch[:0]
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			live = append(live, o)
		} else {
			close(o.done)
		}
	}
	if len(live) == 0 {
		return
	}
	g.writes.Add(int64(len(live)))
	g.batches.Add(1)
	err := g.tx(live)
	if err == nil || len(live) == 1 {
		for _, o := range live {
			o.err = err
			close(o.done)
		}
		return
	}
	g.fallbacks.Add(1)
	for _, o := range live {
		o.err = g.tx([]*op[Tx]{o})
		close(o.done)
	}
}

// tx runs ops in one transaction: nil when all ran and it committed.
func (g *Group[Tx]) tx(ops []*op[Tx]) error {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	tx, err := g.b.Begin(ctx)
	if err != nil {
		return err
	}
	for _, o := range ops {
		if err := o.w(ctx, tx); err != nil {
			_ = g.b.Rollback(tx)
			return err
		}
	}
	return g.b.Commit(tx)
}
