package job

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// eventStore is the event half of a Store, in memory (the rest panics).
type eventStore struct {
	Store
	mu     sync.Mutex
	evs    map[string][]EventRecord
	writes int
}

func (m *eventStore) AppendEvents(_ context.Context, evs []EventRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.evs == nil {
		m.evs = map[string][]EventRecord{}
	}
	m.writes++
	for _, ev := range evs {
		m.evs[ev.JobID] = append(m.evs[ev.JobID], ev)
	}
	return nil
}

func (m *eventStore) stored(id string) []EventRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.evs[id])
	slices.SortFunc(out, func(a, b EventRecord) int { return a.Seq - b.Seq })
	return out
}

func testSink(t *testing.T, st Store) *eventSink {
	k := newEventSink(st, slog.New(slog.NewTextHandler(io.Discard, nil)), newStoreMetrics())
	t.Cleanup(k.close)
	return k
}

func TestHubSlowSubscriberIsDisconnected(t *testing.T) {
	t.Parallel()
	h := newHub("j", 1<<20, nil, 0)
	h.emit(Event{Type: EventQueued})
	_, _, sub := h.subscribe()
	// Nobody reads: emit must not block, and the subscriber is dropped once
	// its queue holds subscriberBytes.
	chunk := strings.Repeat("x", eventChunk)
	for range 2 * subscriberBytes / eventChunk {
		h.emit(Event{Type: EventStdout, Data: chunk})
	}
	evs, _ := sub.take()
	var n int64
	for _, ev := range evs {
		n += eventBytes(ev)
	}
	if n > subscriberBytes || n < subscriberBytes/2 {
		t.Errorf("slow subscriber queued %d bytes, bound %d", n, subscriberBytes)
	}
	if _, ended := sub.take(); !ended {
		t.Error("slow subscriber not ended")
	}
	if len(h.subs) != 0 {
		t.Errorf("%d subscribers still registered", len(h.subs))
	}
}

// TestHubHeadAndTail: per stream, the head half of the cap is persisted as
// produced, the tail half when the job finishes, with a marker at the seq
// of the first event left out; nothing stays in memory after the ack.
func TestHubHeadAndTail(t *testing.T) {
	t.Parallel()
	st := &eventStore{}
	h := newHub("j", 100, testSink(t, st), 0)
	durable := make(chan struct{})
	h.onDurable = func() { close(durable) }
	h.emit(Event{Type: EventQueued})
	h.emit(Event{Type: EventStarted})
	for i := range 20 { // seqs 3..22, 10 bytes each
		h.emit(Event{Type: EventStdout, Data: strings.Repeat(string(rune('a'+i)), 10)})
	}
	h.emit(Event{Type: EventStderr, Data: "err"}) // 23
	// While running: the head is stored, the tail only in memory.
	mem, upTo, sub := h.subscribe()
	if upTo != 23 || sub == nil {
		t.Fatalf("subscribe upTo %d sub %v", upTo, sub)
	}
	var tail []int
	for _, ev := range mem {
		if ev.Type == EventStdout && ev.Seq > 8 { // 3..8 may still be on their way to the store
			tail = append(tail, ev.Seq)
		}
	}
	if !slices.Equal(tail, []int{18, 19, 20, 21, 22}) {
		t.Errorf("tail in memory %v", tail)
	}
	h.emit(Event{Type: EventFinished})
	select {
	case <-durable:
	case <-time.After(10 * time.Second):
		t.Fatal("finished event never durable")
	}
	var seqs []int
	var out strings.Builder
	for _, ev := range st.stored("j") {
		seqs = append(seqs, ev.Seq)
		if ev.Type == EventStdout {
			out.WriteString(ev.Data)
		}
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23, 24}; !slices.Equal(seqs, want) {
		t.Errorf("stored seqs %v, want %v", seqs, want)
	}
	want := strings.Repeat("a", 10) + strings.Repeat("b", 10) + strings.Repeat("c", 10) + strings.Repeat("d", 10) + strings.Repeat("e", 10) +
		"\n[... 100 bytes truncated ...]\n" + strings.Repeat("p", 10) + strings.Repeat("q", 10) + strings.Repeat("r", 10) + strings.Repeat("s", 10) + strings.Repeat("t", 10)
	if out.String() != want {
		t.Errorf("stored stdout %q, want %q", out.String(), want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.inflight) != 0 || h.streams[0].tail != nil {
		t.Errorf("memory kept after durable: %d inflight, tail %v", len(h.inflight), h.streams[0].tail)
	}
	if evs, ended := sub.take(); !ended && len(evs) == 0 {
		t.Error("live subscriber not ended by the finished event")
	}
}

// TestSinkBatches: many events of many jobs become few writes.
func TestSinkBatches(t *testing.T) {
	t.Parallel()
	st := &eventStore{}
	k := testSink(t, st)
	var hubs []*hub
	for i := range 20 {
		hubs = append(hubs, newHub(string(rune('a'+i)), 1<<20, k, 0))
	}
	for range 50 {
		for _, h := range hubs {
			h.emit(Event{Type: EventStdout, Data: "line\n"})
		}
	}
	k.close()
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, evs := range st.evs {
		n += len(evs)
	}
	if n != 1000 || st.writes > 50 {
		t.Errorf("%d events in %d writes, want 1000 in few", n, st.writes)
	}
}

// TestHubSubscriberGetsLargeFinished: a finished event carrying a large
// result reaches a subscriber whose queue holds output.
func TestHubSubscriberGetsLargeFinished(t *testing.T) {
	t.Parallel()
	h := newHub("j", 1<<20, nil, 0)
	_, _, sub := h.subscribe()
	h.emit(Event{Type: EventStdout, Data: strings.Repeat("x", 512<<10)})
	big := &Job{Result: &tools.Result{Content: strings.Repeat("y", 2<<20)}}
	h.emit(Event{Type: EventFinished, Job: big})
	evs, _ := sub.take()
	if len(evs) != 2 || evs[1].Type != EventFinished {
		t.Fatalf("subscriber got %d events", len(evs))
	}
}
