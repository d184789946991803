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

// Group is a queue of writes and the one goroutine that commits them.
type Group[Tx any] struct {
	b        Backend[Tx]
	max      int
	timeout  time.Duration
	q        chan *op[Tx]
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	closeMu  sync.RWMutex // held to queue; Close takes it to stop queueing
	closed   bool

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

// New starts a Group committing at most maxBatch writes per transaction;
// timeout bounds one transaction (its writes and commit).
func New[Tx any](b Backend[Tx], maxBatch int, timeout time.Duration) *Group[Tx] {
	g := &Group[Tx]{b: b, max: max(maxBatch, 1), timeout: timeout,
		q: make(chan *op[Tx], 4*max(maxBatch, 1)), stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// Do queues w and returns once the transaction holding it has committed
// (nil) or w failed (its error). When ctx ends while w is still queued, w
// never runs and Do returns ctx's error; once the committer has taken it,
// Do waits for the outcome, so that a nil error always means committed
// and an error never hides a committed write.
func (g *Group[Tx]) Do(ctx context.Context, w Write[Tx]) error {
	o := &op[Tx]{w: w, done: make(chan struct{})}
	g.closeMu.RLock()
	if g.closed {
		g.closeMu.RUnlock()
		return ErrClosed
	}
	select {
	case g.q <- o:
	case <-ctx.Done():
		g.closeMu.RUnlock()
		return ctx.Err()
	}
	g.closeMu.RUnlock()
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

// Stats returns the counts so far.
func (g *Group[Tx]) Stats() Stats {
	return Stats{Writes: g.writes.Load(), Batches: g.batches.Load(), Fallbacks: g.fallbacks.Load()}
}

// Close commits what is queued and stops the committer; later Do calls
// fail with ErrClosed.
func (g *Group[Tx]) Close() {
	g.stopOnce.Do(func() {
		g.closeMu.Lock()
		g.closed = true
		g.closeMu.Unlock()
		close(g.stop)
	})
	<-g.done
}

func (g *Group[Tx]) run() {
	defer close(g.done)
	batch := make([]*op[Tx], 0, g.max)
	for {
		batch = batch[:0]
		select {
		case o := <-g.q:
			batch = append(batch, o)
		case <-g.stop:
			// Drain what callers queued before Close.
			for {
				select {
				case o := <-g.q:
					g.commit([]*op[Tx]{o})
				default:
					return
				}
			}
		}
	gather:
		for len(batch) < g.max {
			select {
			case o := <-g.q:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		g.commit(batch)
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
