package job

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// A job's events have one source, the Store (AppendEvents, ListEvents): a
// replay after the job finished, after a restart or on another replica
// reads them there. Memory holds only what is not durable yet, bounded in
// bytes:
//
//   - events handed to the sink (eventsink.go) and not yet committed;
//   - the tail of each output stream past its head (below);
//   - each live subscriber's queue (subscriberBytes).
//
// Output is persisted like the runner caps a result: per stream, the first
// half of the job's output cap (Limits.OutputBytes) as it is produced, and
// the last half, kept in memory while the job runs and written when it
// finishes, with a marker event saying how many bytes were left out in
// between (the seq of the first dropped event). Live subscribers see every
// event; a replay sees head, marker and tail. A job that was running when
// the daemon died keeps what was written: the head, lifecycle events and
// everything a stream produced below its cap.

// subscriberBytes is how many bytes of events a live subscriber may lag
// behind. Slow-subscriber policy: emit never blocks a worker; a subscriber
// whose queue is full is disconnected (its channel closes without a
// finished event). It can Subscribe again (with Last-Event-ID).
const subscriberBytes = 1 << 20

// eventOverhead approximates an event's memory beyond its data.
const eventOverhead = 96

// eventBytes approximates the memory an event holds.
func eventBytes(ev Event) int64 {
	return eventOverhead + int64(len(ev.Data)) + jobBytes(ev.Job)
}

// jobBytes approximates the memory of a job snapshot.
func jobBytes(j *Job) int64 {
	if j == nil {
		return 0
	}
	n := int64(256 + len(j.Args))
	if r := j.Result; r != nil {
		n += int64(len(r.Content) + len(r.Error))
		if r.Process != nil {
			n += int64(len(r.Process.Stdout) + len(r.Process.Stderr))
		}
		for _, a := range r.Artifacts {
			n += int64(len(a.Data)) + 128
		}
	}
	return n
}

// hub numbers a job's events, fans them out to live subscribers and hands
// what must be kept to the sink.
type hub struct {
	mu    sync.Mutex
	jobID string
	sink  *eventSink // nil: nothing is persisted (tests of the hub alone)
	seq   int
	// streams are the output streams' persistence state (stdout, stderr).
	streams [2]streamLog
	// inflight are the events handed to the sink in order, not yet
	// acknowledged as committed.
	inflight []Event
	subs     map[*subscriber]struct{}
	done     bool // the finished event was emitted
	// recorded is the finished event once record wrote it (with the
	// job's terminal state); emit then only delivers it.
	recorded *Event
	// onDurable runs once, after the finished event is committed (or
	// given up on): the job's memory can go.
	onDurable func()
	durable   bool
}

// streamLog is one output stream's head budget and in-memory tail.
type streamLog struct {
	headLeft int64 // bytes the head may still take
	headFull bool  // an event did not fit: the rest goes to the tail
	tail     []Event
	tailSize int64
	tailCap  int64
	dropped  int64 // output bytes left out between head and tail
	firstGap int   // seq of the first event left out
	gapTime  time.Time
}

// newHub returns the hub of a job whose output streams are capped at
// streamCap bytes each (head and tail half each, as the runner caps a
// result). seq is the last seq already recorded (0 for a new job).
func newHub(jobID string, streamCap int64, sink *eventSink, seq int) *hub {
	h := &hub{jobID: jobID, sink: sink, seq: seq, subs: make(map[*subscriber]struct{})}
	for i := range h.streams {
		h.streams[i] = streamLog{headLeft: streamCap - streamCap/2, tailCap: streamCap / 2}
	}
	return h
}

func streamIndex(t EventType) int {
	switch t {
	case EventStdout:
		return 0
	case EventStderr:
		return 1
	}
	return -1
}

// emit numbers ev, delivers it to the live subscribers and persists it (or
// keeps it in the tail); it never blocks on a subscriber or the store.
// After the finished event, later events are dropped.
func (h *hub) emit(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	if h.recorded != nil { // committed by record: only deliver it
		if ev.Type == EventFinished {
			h.finish(*h.recorded)
		}
		return
	}
	h.seq++
	ev.Seq = h.seq
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	for sub := range h.subs {
		if !sub.push(ev) { // too slow: disconnect (see subscriberBytes)
			delete(h.subs, sub)
		}
	}
	i := streamIndex(ev.Type)
	switch {
	case i >= 0:
		h.keepOutput(&h.streams[i], ev)
	case ev.Type == EventFinished:
		h.persist(append(h.tails(), ev)...)
		h.finish(ev)
	default:
		h.persist(ev)
	}
}

// tails returns the streams' markers and tails (streamLog.flush), the
// events a finished job still persists. The caller holds h.mu.
func (h *hub) tails() []Event {
	var keep []Event
	for i := range h.streams {
		keep = append(keep, h.streams[i].flush(streamType(i))...)
	}
	return keep
}

// finish ends the hub after its finished event ev: the subscribers got it
// (emit delivers before it persists) and are closed. The caller holds h.mu.
func (h *hub) finish(ev Event) {
	if h.recorded != nil { // delivered only now
		for sub := range h.subs {
			if !sub.push(ev) {
				delete(h.subs, sub)
			}
		}
	}
	h.done = true
	for sub := range h.subs {
		sub.close()
		delete(h.subs, sub)
	}
	h.checkDurable()
}

// record writes the finished event ev, numbered, with every event of the
// job not yet committed (those queued in the sink, the streams' tails),
// through write: one store write that also holds the job's terminal state
// (FinishWriter). It does so only when no flush is writing events of the
// job (then the order of the acknowledgements is kept), and reports
// whether it wrote them. After it did, the subscribers get ev from emit
// (called after waiters are told, as before), and events emitted meanwhile
// are dropped: ev stays the last. When it did not, or write failed,
// nothing changed and the caller records the job and emits ev as before.
func (h *hub) record(ev Event, write func([]EventRecord) error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || h.recorded != nil || h.sink == nil {
		return false
	}
	taken, ok := h.sink.take(h, len(h.inflight))
	if !ok {
		return false
	}
	saved := h.streams
	ev.Seq = h.seq + 1
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	recs := slices.Clip(taken)
	for _, e := range append(h.tails(), ev) {
		recs = append(recs, EventRecord{JobID: h.jobID, Seq: e.Seq, Type: e.Type, Time: e.Time, Data: e.Data})
	}
	if err := write(recs); err != nil {
		h.streams = saved
		h.sink.requeue(h, taken)
		return false
	}
	h.seq = ev.Seq
	clear(h.inflight)
	h.inflight = nil
	h.recorded = &ev
	return true
}

func streamType(i int) EventType {
	if i == 0 {
		return EventStdout
	}
	return EventStderr
}

// keepOutput persists an output event while the stream's head has room,
// else keeps it in the tail, dropping the oldest tail events past tailCap.
func (h *hub) keepOutput(s *streamLog, ev Event) {
	n := int64(len(ev.Data))
	if !s.headFull && n <= s.headLeft {
		s.headLeft -= n
		h.persist(ev)
		return
	}
	s.headFull = true
	s.tail = append(s.tail, ev)
	s.tailSize += n
	for s.tailSize > s.tailCap && len(s.tail) > 0 {
		old := s.tail[0]
		if s.dropped == 0 {
			s.firstGap, s.gapTime = old.Seq, old.Time
		}
		s.dropped += int64(len(old.Data))
		s.tailSize -= int64(len(old.Data))
		s.tail[0] = Event{}
		s.tail = s.tail[1:]
	}
	if len(s.tail) == 0 {
		s.tail = nil // let the backing array go
	}
}

// flush returns the stream's marker (when output was left out) and tail,
// in seq order, and empties the tail.
func (s *streamLog) flush(typ EventType) []Event {
	var out []Event
	if s.dropped > 0 {
		out = append(out, Event{Seq: s.firstGap, Type: typ, Time: s.gapTime,
			Data: fmt.Sprintf("\n[... %d bytes truncated ...]\n", s.dropped)})
	}
	out = append(out, s.tail...)
	s.tail, s.tailSize = nil, 0
	return out
}

// persist hands events to the sink; they stay in inflight until the sink
// acknowledges them. The caller holds h.mu.
func (h *hub) persist(evs ...Event) {
	if h.sink == nil {
		return
	}
	evs = h.sink.add(h, evs)
	h.inflight = append(h.inflight, evs...)
}

// ack is the sink's acknowledgement that the first n inflight events are
// committed (or given up on).
func (h *hub) ack(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, len(h.inflight))
	clear(h.inflight[:n])
	h.inflight = h.inflight[n:]
	if len(h.inflight) == 0 {
		h.inflight = nil
	}
	h.checkDurable()
}

// checkDurable runs onDurable once everything up to the finished event is
// committed. The caller holds h.mu; onDurable must not take it.
func (h *hub) checkDurable() {
	if h.done && len(h.inflight) == 0 && !h.durable {
		h.durable = true
		if h.onDurable != nil {
			go h.onDurable()
		}
	}
}

// subscribe registers a live subscriber (none once the job finished) and
// returns the events that are in memory only (not committed, or kept in a
// tail) in seq order, and upTo: the replay is the store's events with
// seq <= upTo merged with mem; live events have seqs above upTo.
func (h *hub) subscribe() (mem []Event, upTo int, sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	mem = slices.Clone(h.inflight)
	for i := range h.streams {
		mem = append(mem, h.streams[i].tail...)
	}
	slices.SortFunc(mem, func(a, b Event) int { return a.Seq - b.Seq })
	if !h.done {
		sub = newSubscriber()
		h.subs[sub] = struct{}{}
	}
	return mem, h.seq, sub
}

// unsubscribe removes a subscriber that went away.
func (h *hub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
}

// subscriber is a live subscriber's queue, bounded by subscriberBytes.
type subscriber struct {
	mu     sync.Mutex
	q      []Event
	size   int64
	closed bool // no more events will come: finished, or disconnected
	notify chan struct{}
}

func newSubscriber() *subscriber { return &subscriber{notify: make(chan struct{}, 1)} }

// push queues ev; false (and the subscriber closed) when an output event
// would take the queue past subscriberBytes. Lifecycle events are always
// queued (a job has a handful, and the finished one must not cost a
// subscriber its stream), so the queue holds at most subscriberBytes of
// output plus those snapshots.
func (s *subscriber) push(ev Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	n := eventBytes(ev)
	if streamIndex(ev.Type) >= 0 && s.size+n > subscriberBytes {
		s.closed = true // disconnected: it reads what it missed from the store
		s.signal()
		return false
	}
	s.q = append(s.q, ev)
	s.size += n
	s.signal()
	return true
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.signal()
}

func (s *subscriber) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the queued events and whether the subscription has ended
// (closed and nothing left).
func (s *subscriber) take() ([]Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q, s.size = nil, 0
	return q, s.closed && len(q) == 0
}
