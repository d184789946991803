package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
)

// events streams a job's events as server-sent events:
//
//	event: <type>
//	id: <seq>
//	data: <event JSON>
//
// It replays the events so far (after Last-Event-ID when given), sends a
// comment heartbeat every Options.Heartbeat, and ends after the finished
// event.
func (rs *jobsResource) events(w http.ResponseWriter, r *http.Request) {
	after := -1
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			rs.writeError(w, r, badRequest(fmt.Sprintf("Last-Event-ID %q is not an event sequence number", s)))
			return
		}
		after = n
	}
	ctx := r.Context()
	ch, err := rs.svc.Subscribe(ctx, readScope(ctx), chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's WriteTimeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}

	heartbeat := time.NewTicker(rs.opts.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Seq <= after {
				continue
			}
			if err := writeEvent(w, ev); err != nil || rc.Flush() != nil {
				return
			}
			if ev.Type == job.EventFinished {
				return
			}
		}
	}
}

func writeEvent(w http.ResponseWriter, ev job.Event) error {
	data, err := json.Marshal(viewEvent(ev))
	if err != nil {
		return err
	}
	// json.Marshal output has no raw newlines, so one data: line suffices.
	_, err = fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", sseToken(string(ev.Type)), ev.Seq, data)
	return err
}

// sseToken drops CR and LF so a value cannot break the framing.
func sseToken(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c != '\n' && c != '\r' {
			out = append(out, c)
		}
	}
	return string(out)
}
