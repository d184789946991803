package job

import (
	"testing"
)

func TestHubSlowSubscriberIsDisconnected(t *testing.T) {
	t.Parallel()
	h := newHub(8)
	h.emit(Event{Type: EventQueued})
	h.emit(Event{Type: EventStarted})
	ch := h.subscribe(t.Context())
	// Nobody reads ch: emit must not block, and the subscriber is dropped
	// once its buffer is full.
	for range subscriberBuffer + 100 {
		h.emit(Event{Type: EventStdout, Data: "x"})
	}
	n := 0
	for range ch {
		n++
	}
	if want := 2 + subscriberBuffer; n != want {
		t.Errorf("slow subscriber got %d events before its channel closed, want %d", n, want)
	}
	if len(h.subs) != 0 {
		t.Errorf("%d subscribers still registered", len(h.subs))
	}
}

func TestHubHistoryBound(t *testing.T) {
	t.Parallel()
	h := newHub(5)
	h.emit(Event{Type: EventQueued})
	h.emit(Event{Type: EventStarted})
	for range 10 {
		h.emit(Event{Type: EventStderr})
	}
	h.emit(Event{Type: EventFinished})
	h.emit(Event{Type: EventStdout}) // after finished: dropped

	var got []Event
	for ev := range h.subscribe(t.Context()) {
		got = append(got, ev)
	}
	if len(got) != 5 {
		t.Fatalf("replayed %d events, want 5", len(got))
	}
	if got[0].Type != EventQueued || got[1].Type != EventStarted || got[4].Type != EventFinished {
		t.Errorf("lifecycle events not kept: %+v", got)
	}
	if got[2].Seq != 11 || got[4].Seq != 13 {
		t.Errorf("seqs %d..%d, want the newest output (11, 12) then finished 13", got[2].Seq, got[4].Seq)
	}
}
