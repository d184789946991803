package job

import (
	"sync"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

const (
	// defaultStreamBytes caps the output streamed as events per stream when
	// the job has no OutputBytes limit.
	defaultStreamBytes = 1 << 20
	// eventChunk is the largest stdout/stderr event.
	eventChunk = 8 << 10
)

// processInfo converts a runner result into the tools form.
func processInfo(r runner.Result, l runner.Limits) tools.ProcessInfo {
	return tools.ProcessInfo{
		ExitCode:        r.ExitCode,
		Signal:          r.Signal,
		OOMKilled:       r.OOMKilled,
		TimedOut:        r.TimedOut,
		OutputTruncated: r.StdoutTruncated || r.StderrTruncated,
		Stdout:          string(r.Stdout),
		Stderr:          string(r.Stderr),
		MemoryLimit:     l.MemoryBytes,
	}
}

// eventWriter streams process output as events. It never blocks (hub.emit
// does not) and stops streaming after limit bytes; the Result keeps the
// runner's capped copy either way. Chunks may split a UTF-8 sequence.
type eventWriter struct {
	mu   sync.Mutex
	h    *hub
	typ  EventType
	left int64
}

func newEventWriter(h *hub, typ EventType, limit int64) *eventWriter {
	return &eventWriter{h: h, typ: typ, left: limit}
}

func (w *eventWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if int64(len(p)) > w.left {
		p = p[:w.left]
	}
	w.left -= int64(len(p))
	for len(p) > 0 {
		c := min(len(p), eventChunk)
		w.h.emit(Event{Type: w.typ, Data: string(p[:c])})
		p = p[c:]
	}
	return n, nil
}
