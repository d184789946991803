package job

import (
	"sync"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

const (
	// defaultStreamBytes caps the output of a stream kept as events when
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
		ForkLoop:        r.ForkLoop,
		OutputTruncated: r.StdoutTruncated || r.StderrTruncated,
		Stdout:          string(r.Stdout),
		Stderr:          string(r.Stderr),
		MemoryLimit:     l.MemoryBytes,
		PIDsLimit:       l.PIDs,
	}
}

// eventWriter streams process output as events. It never blocks (hub.emit
// does not). Every chunk reaches live subscribers; the hub persists the
// head and the tail of each stream within the job's output cap, as the
// runner caps the Result. Chunks may split a UTF-8 sequence.
type eventWriter struct {
	mu  sync.Mutex
	h   *hub
	typ EventType
}

func newEventWriter(h *hub, typ EventType) *eventWriter {
	return &eventWriter{h: h, typ: typ}
}

func (w *eventWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		c := min(len(p), eventChunk)
		w.h.emit(Event{Type: w.typ, Data: string(p[:c])})
		p = p[c:]
	}
	return n, nil
}
