package job

import (
	"context"
	"time"
)

// Timeline is a job's life from its persisted events (the store's, as a
// replay after a restart or from another replica sees them): one entry per
// lifecycle event, the output between two of them folded into one
// "output" entry, each with the time until the next.
type Timeline struct {
	JobID   string          `json:"job_id"`
	State   State           `json:"state"`
	Entries []TimelineEntry `json:"entries"`
	// QueuedMS is created → started, RunMS started → finished, TotalMS
	// created → finished (or → now while the job is not finished).
	QueuedMS *float64 `json:"queued_ms,omitempty"`
	RunMS    *float64 `json:"run_ms,omitempty"`
	TotalMS  float64  `json:"total_ms"`
	// Truncated: the job has more events than a timeline reads
	// (maxTimelineEvents); the entries stop there.
	Truncated bool `json:"truncated,omitempty"`
}

// EventOutput names the folded output entries of a Timeline.
const EventOutput EventType = "output"

// TimelineEntry is one step of a Timeline.
type TimelineEntry struct {
	Type EventType `json:"type"`
	// Seq is the event's (an output entry's first event's) sequence number.
	Seq  int       `json:"seq"`
	Time time.Time `json:"time"`
	// DurationMS is the time until the next entry; for the last entry of a
	// job not yet finished, until now; 0 for the finished event.
	DurationMS float64 `json:"duration_ms"`
	// Output entries: the events folded and the bytes per stream.
	Chunks      int `json:"chunks,omitempty"`
	StdoutBytes int `json:"stdout_bytes,omitempty"`
	StderrBytes int `json:"stderr_bytes,omitempty"`
}

// maxTimelineEvents bounds the events one Timeline reads.
const maxTimelineEvents = 20000

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Timeline returns the timeline of a tenant's job (AllTenants: any).
func (s *Service) Timeline(ctx context.Context, tenant, id string) (*Timeline, error) {
	j, err := s.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	t := &Timeline{JobID: j.ID, State: j.State, Entries: []TimelineEntry{}}
	after, read := 0, 0
	for {
		evs, err := s.st.ListEvents(ctx, id, after, 1000)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if read == maxTimelineEvents {
				t.Truncated = true
				break
			}
			read++
			t.add(ev)
		}
		if t.Truncated {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	if len(t.Entries) == 0 { // recorded before events were stored
		for _, ev := range synthesizeEvents(j) {
			t.add(EventRecord{JobID: j.ID, Seq: ev.Seq, Type: ev.Type, Time: ev.Time})
		}
	}
	now := time.Now()
	for i := range t.Entries {
		e := &t.Entries[i]
		switch {
		case i+1 < len(t.Entries):
			e.DurationMS = ms(t.Entries[i+1].Time.Sub(e.Time))
		case e.Type != EventFinished && !j.State.Terminal():
			e.DurationMS = ms(now.Sub(e.Time))
		}
	}
	end := now
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	t.TotalMS = ms(end.Sub(j.CreatedAt))
	if j.StartedAt != nil {
		q := ms(j.StartedAt.Sub(j.CreatedAt))
		t.QueuedMS = &q
		r := ms(end.Sub(*j.StartedAt))
		t.RunMS = &r
	}
	return t, nil
}

func (t *Timeline) add(ev EventRecord) {
	if ev.Type == EventStdout || ev.Type == EventStderr {
		n := len(t.Entries)
		if n == 0 || t.Entries[n-1].Type != EventOutput {
			t.Entries = append(t.Entries, TimelineEntry{Type: EventOutput, Seq: ev.Seq, Time: ev.Time})
			n++
		}
		o := &t.Entries[n-1]
		o.Chunks++
		if ev.Type == EventStdout {
			o.StdoutBytes += len(ev.Data)
		} else {
			o.StderrBytes += len(ev.Data)
		}
		return
	}
	t.Entries = append(t.Entries, TimelineEntry{Type: ev.Type, Seq: ev.Seq, Time: ev.Time})
}
