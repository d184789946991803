package job

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// gatedEvents is an eventStore whose AppendEvents waits for gate once
// entered is signalled (a flush caught in the middle of its write).
type gatedEvents struct {
	eventStore
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedEvents) AppendEvents(ctx context.Context, evs []EventRecord) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.eventStore.AppendEvents(ctx, evs)
}

func storedSeqs(st *eventStore, id string) []int {
	var seqs []int
	for _, ev := range st.stored(id) {
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

func waitDurable(t *testing.T, durable chan struct{}) {
	t.Helper()
	select {
	case <-durable:
	case <-time.After(10 * time.Second):
		t.Fatal("finished event never durable")
	}
}

// TestHubRecordWithJob: record hands the write every event not yet
// committed (queued in the sink, the streams' tails) and the finished
// event, in seq order; the sink writes none of them again, the
// subscribers get the finished event only from emit, and nothing stays in
// memory.
func TestHubRecordWithJob(t *testing.T) {
	t.Parallel()
	st := &eventStore{}
	h := newHub("j", 100, testSink(t, st), 0)
	durable := make(chan struct{})
	h.onDurable = func() { close(durable) }
	h.emit(Event{Type: EventQueued})
	h.emit(Event{Type: EventStarted})
	for i := range 20 { // seqs 3..22: the head 3..7, the tail 18..22
		h.emit(Event{Type: EventStdout, Data: strings.Repeat(string(rune('a'+i)), 10)})
	}
	_, _, sub := h.subscribe()
	var written []EventRecord
	ok := h.record(Event{Type: EventFinished}, func(recs []EventRecord) error {
		written = recs
		return st.AppendEvents(context.Background(), recs)
	})
	if !ok {
		t.Fatal("record did not write (no flush was running)")
	}
	var seqs []int
	for _, r := range written {
		seqs = append(seqs, r.Seq)
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23}; !slices.Equal(seqs, want) {
		t.Errorf("record wrote seqs %v, want %v (marker at 8)", seqs, want)
	}
	if evs, ended := sub.take(); ended || slices.ContainsFunc(evs, func(ev Event) bool { return ev.Type == EventFinished }) {
		t.Errorf("the finished event reached a subscriber before emit: %v ended %v", evs, ended)
	}
	h.emit(Event{Type: EventStdout, Data: "late"}) // after the recorded finished event: dropped
	h.emit(Event{Type: EventFinished})
	waitDurable(t, durable)
	evs, _ := sub.take()
	if len(evs) == 0 || evs[len(evs)-1].Type != EventFinished || evs[len(evs)-1].Seq != 23 {
		t.Errorf("subscriber got %v, want the finished event 23 last", evs)
	}
	time.Sleep(3 * flushDelay) // a flush that would rewrite them
	st.mu.Lock()
	writes := st.writes
	st.mu.Unlock()
	if got := storedSeqs(st, "j"); len(got) != len(written) || writes != 1 {
		t.Errorf("store has seqs %v in %d writes, want %d events in the one write", got, writes, len(written))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sink.mu.Lock()
	queued := len(h.sink.q)
	h.sink.mu.Unlock()
	if len(h.inflight) != 0 || h.streams[0].tail != nil || queued != 0 {
		t.Errorf("memory kept: %d inflight, tail %v, %d queued", len(h.inflight), h.streams[0].tail, queued)
	}
}

// TestHubRecordWhileFlushing: while a flush writes events of the job,
// record writes nothing (the acknowledgements must stay in order) and the
// finished event goes the sink's way.
func TestHubRecordWhileFlushing(t *testing.T) {
	t.Parallel()
	st := &gatedEvents{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	h := newHub("j", 1<<20, testSink(t, st), 0)
	durable := make(chan struct{})
	h.onDurable = func() { close(durable) }
	h.emit(Event{Type: EventQueued})
	<-st.entered // the flush holds event 1
	h.emit(Event{Type: EventStarted})
	if h.record(Event{Type: EventFinished}, func([]EventRecord) error {
		t.Error("record wrote while a flush of the job was running")
		return nil
	}) {
		t.Fatal("record reported a write")
	}
	h.emit(Event{Type: EventFinished})
	close(st.gate)
	waitDurable(t, durable)
	if got := storedSeqs(&st.eventStore, "j"); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("stored seqs %v", got)
	}
}

// TestHubRecordWriteFails: a failed write changes nothing: the events go
// back to the sink, and the finished event emitted afterwards is
// persisted as before, every event once.
func TestHubRecordWriteFails(t *testing.T) {
	t.Parallel()
	st := &eventStore{}
	h := newHub("j", 40, testSink(t, st), 0)
	durable := make(chan struct{})
	h.onDurable = func() { close(durable) }
	h.emit(Event{Type: EventQueued})
	for i := range 6 { // seqs 2..7: head 2..3, tail 6..7 (4..5 left out: a marker at 4)
		h.emit(Event{Type: EventStdout, Data: strings.Repeat(string(rune('a'+i)), 10)})
	}
	if h.record(Event{Type: EventFinished}, func([]EventRecord) error { return errors.New("disk full") }) {
		t.Fatal("record reported a failed write as done")
	}
	h.emit(Event{Type: EventFinished})
	waitDurable(t, durable)
	if got, want := storedSeqs(st, "j"), []int{1, 2, 3, 4, 6, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("stored seqs %v, want %v", got, want)
	}
}
