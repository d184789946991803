package job

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The sink writes the events of every job to the Store in batches: one
// AppendEvents (one transaction) per flush, never one per output chunk. A
// flush starts flushDelay after the first event of a batch, or at once
// when flushBytes are waiting; events arriving while a flush runs form
// the next batch, so batching grows with the load (the store's own group
// commit can come underneath without changing this side).
const (
	flushDelay = 5 * time.Millisecond
	flushBytes = 256 << 10
	// sinkBudget bounds the bytes waiting for a flush (a batch being
	// written is at most as large). Past it, output events are not
	// persisted (counted in sandboxd_events_dropped_total); lifecycle
	// events always are.
	sinkBudget = 16 << 20
)

type sinkItem struct {
	h    *hub
	rec  EventRecord
	size int64
}

type eventSink struct {
	st  Store
	log *slog.Logger
	m   *storeMetrics

	mu   sync.Mutex
	q    []sinkItem
	size int64

	wake, full chan struct{} // capacity 1 each
	stop, done chan struct{}
	stopOnce   sync.Once
}

func newEventSink(st Store, log *slog.Logger, m *storeMetrics) *eventSink {
	k := &eventSink{st: st, log: log, m: m,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

// add queues evs of h and returns those it kept (all but output events
// past sinkBudget). Called with h.mu held, so a hub's events enter the
// queue in the order of its inflight list.
func (k *eventSink) add(h *hub, evs []Event) []Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	kept := evs[:0:0]
	for _, ev := range evs {
		n := int64(eventOverhead + len(ev.Data))
		if k.size+n > sinkBudget && streamIndex(ev.Type) >= 0 {
			k.m.eventsDropped.Inc()
			continue
		}
		k.q = append(k.q, sinkItem{h: h, size: n, rec: EventRecord{
			JobID: h.jobID, Seq: ev.Seq, Type: ev.Type, Time: ev.Time, Data: ev.Data}})
		k.size += n
		kept = append(kept, ev)
	}
	signal(k.wake)
	if k.size >= flushBytes {
		signal(k.full)
	}
	return kept
}

// take removes h's queued events from the queue and returns their
// records, when the queue holds exactly n of them (h's inflight: none is
// being written by a flush); else it takes nothing and reports false.
// The caller holds h.mu and writes the records itself (hub.record).
func (k *eventSink) take(h *hub, n int) ([]EventRecord, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var recs []EventRecord
	for _, it := range k.q {
		if it.h == h {
			recs = append(recs, it.rec)
		}
	}
	if len(recs) != n {
		return nil, false
	}
	if n > 0 {
		k.q = slices.DeleteFunc(k.q, func(it sinkItem) bool {
			if it.h == h {
				k.size -= it.size
				return true
			}
			return false
		})
	}
	return recs, true
}

// requeue puts back, at the end of the queue, records of h that take
// returned and could not be written.
func (k *eventSink) requeue(h *hub, recs []EventRecord) {
	if len(recs) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range recs {
		n := int64(eventOverhead + len(r.Data))
		k.q = append(k.q, sinkItem{h: h, rec: r, size: n})
		k.size += n
	}
	signal(k.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (k *eventSink) run() {
	defer close(k.done)
	for {
		select {
		case <-k.wake:
		case <-k.stop:
			k.flush()
			return
		}
		t := time.NewTimer(flushDelay)
		select {
		case <-t.C:
		case <-k.full:
		case <-k.stop:
		}
		t.Stop()
		k.flush()
	}
}

// close writes what is queued and stops the sink; events added later are
// not written.
func (k *eventSink) close() {
	k.stopOnce.Do(func() { close(k.stop) })
	<-k.done
}

// flush writes the queued events and acknowledges them to their hubs. A
// batch that fails is retried job by job (one job deleted meanwhile must
// not lose the others' events); what still fails is logged and dropped,
// so memory stays bounded when the store is down.
func (k *eventSink) flush() {
	k.mu.Lock()
	batch := k.q
	k.q, k.size = nil, 0
	k.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	recs := make([]EventRecord, len(batch))
	for i, it := range batch {
		recs[i] = it.rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := k.st.AppendEvents(ctx, recs); err != nil {
		k.perJob(ctx, batch, err)
	}
	k.m.eventBatches.Inc()
	counts := make(map[*hub]int)
	for _, it := range batch {
		counts[it.h]++
	}
	for h, n := range counts {
		h.ack(n)
	}
}

func (k *eventSink) perJob(ctx context.Context, batch []sinkItem, batchErr error) {
	byJob := make(map[string][]EventRecord)
	var order []string
	for _, it := range batch {
		if _, ok := byJob[it.rec.JobID]; !ok {
			order = append(order, it.rec.JobID)
		}
		byJob[it.rec.JobID] = append(byJob[it.rec.JobID], it.rec)
	}
	for _, id := range order {
		if err := k.st.AppendEvents(ctx, byJob[id]); err != nil {
			if !errors.Is(err, ErrNotFound) { // a job deleted by retention meanwhile is no news
				k.log.Error("record job events", "job", id, "events", len(byJob[id]), "err", err, "batch_err", batchErr)
			}
			k.m.eventsDropped.Add(float64(len(byJob[id])))
		}
	}
}
