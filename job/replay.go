package job

import (
	"context"
	"time"
)

// replayPage is how many stored events one read of a replay takes.
const replayPage = 256

// Subscribe replays the job's events so far and then streams new ones; the
// channel closes after the finished event or when ctx ends. The replay
// reads the store (one source for every process and replica), merged with
// what this process holds in memory only (events not committed yet, the
// tail of a running job's output). Lifecycle events read from the store
// carry the job as its record says at that step. A live subscriber that
// falls more than subscriberBytes behind is disconnected (the channel
// closes early); it may subscribe again. A job recorded before events
// were stored (no events at all) gets queued, started and finished
// synthesized from its record.
func (s *Service) Subscribe(ctx context.Context, tenant, id string) (<-chan Event, error) {
	j, err := s.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	var (
		mem  []Event
		upTo = int(^uint(0) >> 1)
		sub  *subscriber
		h    *hub
	)
	if e := s.entry(id); e != nil {
		h = e.events
		mem, upTo, sub = h.subscribe()
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		if sub != nil {
			defer h.unsubscribe(sub)
		}
		s.stream(ctx, j, mem, upTo, sub, out)
	}()
	return out, nil
}

// stream sends the replay, then the live events of sub (nil: none).
func (s *Service) stream(ctx context.Context, j *Job, mem []Event, upTo int, sub *subscriber, out chan<- Event) {
	send := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	sent, finished := 0, false
	emit := func(ev Event) bool {
		if ev.Seq <= sent {
			return true // the same event from memory and the store
		}
		sent = ev.Seq
		finished = finished || ev.Type == EventFinished
		return send(ev)
	}
	stored := 0
	after := 0
read:
	for {
		recs, err := s.st.ListEvents(ctx, j.ID, after, replayPage)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("replay job events", "job", j.ID, "err", err)
			}
			break
		}
		for _, rec := range recs {
			if rec.Seq > upTo {
				break read
			}
			for len(mem) > 0 && mem[0].Seq <= rec.Seq {
				if !emit(mem[0]) {
					return
				}
				mem = mem[1:]
			}
			stored++
			ev, ok := s.hydrate(ctx, &j, rec)
			if !ok || !emit(ev) {
				return
			}
		}
		if len(recs) < replayPage {
			break
		}
		after = recs[len(recs)-1].Seq
	}
	for _, ev := range mem {
		if !emit(ev) {
			return
		}
	}
	if sub == nil {
		if stored == 0 && sent == 0 { // recorded before events were
			for _, ev := range synthesizeEvents(j) {
				if !send(ev) {
					return
				}
			}
			finished = j.State.Terminal()
		}
		if !finished {
			if fresh, err := s.st.Get(ctx, j.ID); err == nil {
				j = fresh
			}
			if j.State.Terminal() { // finished, its event not committed yet (or lost)
				emit(Event{Seq: sent + 1, Type: EventFinished, Time: finishedAt(j), Job: cloneJob(j)})
				return
			}
			if s.rep == nil {
				<-ctx.Done() // queued in the store, not in this process
				return
			}
			// Queued for any replica (or run by another): its events
			// are followed in the store as they are committed.
			d := 20 * time.Millisecond
			for !finished && ctx.Err() == nil {
				recs, err := s.st.ListEvents(ctx, j.ID, sent, replayPage)
				if err == nil && len(recs) > 0 {
					for _, rec := range recs {
						ev, ok := s.hydrate(ctx, &j, rec)
						if !ok || !emit(ev) {
							return
						}
					}
					d = 20 * time.Millisecond
					continue
				}
				if fresh, err := s.st.Get(ctx, j.ID); err == nil && fresh.State.Terminal() {
					if recs, err := s.st.ListEvents(ctx, j.ID, sent, replayPage); err == nil && len(recs) > 0 {
						continue // its finished event came meanwhile
					}
					j = fresh
					emit(Event{Seq: sent + 1, Type: EventFinished, Time: finishedAt(j), Job: cloneJob(j)})
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
				d = min(2*d, 250*time.Millisecond)
			}
		}
		return
	}
	for !finished {
		select {
		case <-ctx.Done():
			return
		case <-sub.notify:
		}
		evs, ended := sub.take()
		for _, ev := range evs {
			if !emit(ev) {
				return
			}
		}
		if ended {
			return
		}
	}
}

// hydrate turns a stored event into an Event; lifecycle events get the job
// as it was at that step, taken from the record (re-read once when the
// finished event is newer than the record read first).
func (s *Service) hydrate(ctx context.Context, jp **Job, rec EventRecord) (Event, bool) {
	ev := Event{Seq: rec.Seq, Type: rec.Type, Time: rec.Time, Data: rec.Data}
	j := *jp
	switch rec.Type {
	case EventQueued, EventPendingApproval:
		q := cloneJob(j)
		q.State, q.Reason, q.Result, q.StartedAt, q.FinishedAt = StateQueued, "", nil, nil, nil
		if rec.Type == EventPendingApproval {
			q.State = StatePendingApproval
		}
		ev.Job = q
	case EventStarted:
		r := cloneJob(j)
		r.State, r.Reason, r.Result, r.FinishedAt = StateRunning, "", nil, nil
		if r.StartedAt == nil {
			t := rec.Time
			r.StartedAt = &t
		}
		ev.Job = r
	case EventFinished:
		if !j.State.Terminal() {
			fresh, err := s.st.Get(ctx, j.ID)
			if err != nil {
				return ev, false
			}
			*jp, j = fresh, fresh
		}
		ev.Job = cloneJob(j)
	}
	return ev, true
}

func finishedAt(j *Job) time.Time {
	if j.FinishedAt != nil {
		return *j.FinishedAt
	}
	return j.CreatedAt
}

// synthesizeEvents rebuilds the lifecycle events of a job recorded before
// events were stored: queued, started when it started, finished when it
// is terminal.
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
		evs = append(evs, Event{Type: EventFinished, Time: finishedAt(j), Job: cloneJob(j)})
	}
	for i := range evs {
		evs[i].Seq = i + 1
	}
	return evs
}
