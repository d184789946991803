package iox

import (
	"io"
	"sync"
	"time"
)

// maxQueued bounds what an AsyncWriter buffers for a slow destination; beyond
// it, chunks are dropped for that destination (the capped copy still gets
// everything).
const maxQueued = 8 << 20

// AsyncWriter forwards writes to W from its own goroutine, so a slow or
// blocked W never stalls the writer (the sandboxed process's pipe).
type AsyncWriter struct {
	w       io.Writer
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	queued  int
	closed  bool
	dropped int64
	done    chan struct{}
}

// NewAsyncWriter starts the forwarding goroutine; call Close to stop it.
func NewAsyncWriter(w io.Writer) *AsyncWriter {
	a := &AsyncWriter{w: w, done: make(chan struct{})}
	a.cond = sync.NewCond(&a.mu)
	go a.loop()
	return a
}

// Write queues a copy of p; it never blocks on W and never fails.
func (a *AsyncWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.queued+len(p) > maxQueued {
		a.dropped += int64(len(p))
		return len(p), nil
	}
	a.queue = append(a.queue, append([]byte(nil), p...))
	a.queued += len(p)
	a.cond.Signal()
	return len(p), nil
}

func (a *AsyncWriter) loop() {
	defer close(a.done)
	for {
		a.mu.Lock()
		for len(a.queue) == 0 && !a.closed {
			a.cond.Wait()
		}
		if len(a.queue) == 0 {
			a.mu.Unlock()
			return
		}
		chunk := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		a.queued -= len(chunk)
		a.mu.Unlock()
		_, _ = a.w.Write(chunk) // a failing destination must not fail the exec
	}
}

// Close stops accepting data and waits up to wait for the queue to drain.
// It returns the number of bytes dropped for W.
func (a *AsyncWriter) Close(wait time.Duration) int64 {
	a.mu.Lock()
	a.closed = true
	a.cond.Signal()
	a.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dropped
}

// Stream combines the capped capture and the optional live tee of one stream.
type Stream struct {
	Capture *Capture
	async   *AsyncWriter
}

// NewStream returns a stream capped at limit that also forwards to live when
// live is non-nil.
func NewStream(limit int64, live io.Writer) *Stream {
	s := &Stream{Capture: NewCapture(limit)}
	if live != nil {
		s.async = NewAsyncWriter(live)
	}
	return s
}

func (s *Stream) Write(p []byte) (int, error) {
	_, _ = s.Capture.Write(p)
	if s.async != nil {
		_, _ = s.async.Write(p)
	}
	return len(p), nil
}

// Finish flushes the live writer (waiting at most wait) and returns the
// captured bytes and whether they were truncated.
func (s *Stream) Finish(wait time.Duration) ([]byte, bool) {
	if s.async != nil {
		s.async.Close(wait)
	}
	return s.Capture.Bytes()
}
