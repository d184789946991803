package job

import (
	"context"
	"sync"
	"time"
)

// subscriberBuffer is how many live events a subscriber may lag behind.
// Slow-subscriber policy: emit never blocks a worker; a subscriber whose
// buffer is full is disconnected (its channel closes without a finished
// event). It can Subscribe again: the replay starts from the job's bounded
// history.
const subscriberBuffer = 256

// hub keeps a job's event history and fans events out to subscribers.
type hub struct {
	mu      sync.Mutex
	limit   int // history bound
	seq     int
	history []Event
	subs    map[chan Event]func() bool // channel → stop its ctx watcher
	done    bool                       // the finished event was emitted
}

func newHub(limit int) *hub {
	return &hub{limit: limit, subs: make(map[chan Event]func() bool)}
}

// emit appends ev to the history and delivers it; it never blocks. After a
// finished event all subscribers are closed and later events are dropped.
func (h *hub) emit(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	h.seq++
	ev.Seq = h.seq
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	h.history = append(h.history, ev)
	if len(h.history) > h.limit {
		h.dropOldestOutput()
	}
	for ch, stop := range h.subs {
		select {
		case ch <- ev:
		default: // too slow: disconnect (see subscriberBuffer)
			stop()
			delete(h.subs, ch)
			close(ch)
		}
	}
	if ev.Type == EventFinished {
		h.done = true
		for ch, stop := range h.subs {
			stop()
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// dropOldestOutput removes the oldest stdout/stderr event, keeping the
// lifecycle events a replay must show.
func (h *hub) dropOldestOutput() {
	for i, ev := range h.history {
		if ev.Type == EventStdout || ev.Type == EventStderr {
			h.history = append(h.history[:i], h.history[i+1:]...)
			return
		}
	}
}

// subscribe replays the history into a new channel and then streams live
// events until the finished event or ctx ends.
func (h *hub) subscribe(ctx context.Context) <-chan Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan Event, len(h.history)+subscriberBuffer)
	for _, ev := range h.history {
		ch <- ev
	}
	if h.done {
		close(ch)
		return ch
	}
	h.subs[ch] = context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	})
	return ch
}

// synthesizeEvents rebuilds the lifecycle events of a job that has no
// in-memory history (finished long ago, or run by an earlier process):
// queued, started when it started, finished when it is terminal. Output is
// not kept durably; the Result holds the captured output.
func synthesizeEvents(j *Job) []Event {
	queued := cloneJob(j)
	queued.State, queued.Reason, queued.Result = StateQueued, "", nil
	queued.StartedAt, queued.FinishedAt = nil, nil
	evs := []Event{{Type: EventQueued, Time: j.CreatedAt, Job: queued}}
	if j.StartedAt != nil {
		started := cloneJob(j)
		started.State, started.Reason, started.Result, started.FinishedAt = StateRunning, "", nil, nil
		evs = append(evs, Event{Type: EventStarted, Time: *j.StartedAt, Job: started})
	}
	if j.State.Terminal() {
		t := j.CreatedAt
		if j.FinishedAt != nil {
			t = *j.FinishedAt
		}
		evs = append(evs, Event{Type: EventFinished, Time: t, Job: cloneJob(j)})
	}
	for i := range evs {
		evs[i].Seq = i + 1
	}
	return evs
}
