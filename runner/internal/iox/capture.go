// Package iox holds the output plumbing shared by runner backends: a capped
// capture buffer that keeps the head and the tail of a stream, and a tee that
// forwards to a caller's writer without letting a slow writer stall the
// sandboxed process.
package iox

import (
	"fmt"
	"sync"
)

// Capture keeps at most Limit bytes of a stream: the first half and the last
// half. It never returns an error and never blocks, so the process writing
// into it cannot be stalled.
type Capture struct {
	mu    sync.Mutex
	limit int64
	head  []byte
	tail  []byte // ring buffer of the last tailCap bytes
	start int    // index of the oldest byte in tail when full
	total int64
}

// NewCapture returns a capture capped at limit bytes (limit <= 0: unlimited).
func NewCapture(limit int64) *Capture { return &Capture{limit: limit} }

func (c *Capture) headCap() int64 {
	return c.limit - c.limit/2
}

func (c *Capture) tailCap() int64 { return c.limit / 2 }

// Write implements io.Writer; it always consumes all of p.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if c.limit <= 0 {
		c.head = append(c.head, p...)
		return n, nil
	}
	if room := c.headCap() - int64(len(c.head)); room > 0 {
		k := min(int64(len(p)), room)
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tc := int(c.tailCap())
	if len(p) == 0 || tc == 0 {
		return n, nil
	}
	if len(p) >= tc {
		c.tail = append(c.tail[:0], p[len(p)-tc:]...)
		c.start = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(c.tail) < tc {
			k := min(len(p), tc-len(c.tail))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.start:], p)
		p = p[k:]
		c.start = (c.start + k) % tc
	}
	return n, nil
}

// Total is the number of bytes written so far.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Bytes returns the captured output and whether it was truncated. A
// truncated result is head + "\n[... N bytes truncated ...]\n" + tail.
func (c *Capture) Bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := make([]byte, 0, len(c.tail))
	tail = append(tail, c.tail[c.start:]...)
	tail = append(tail, c.tail[:c.start]...)
	kept := int64(len(c.head) + len(tail))
	if kept == c.total {
		out := make([]byte, 0, kept)
		return append(append(out, c.head...), tail...), false
	}
	marker := fmt.Sprintf("\n[... %d bytes truncated ...]\n", c.total-kept)
	out := make([]byte, 0, kept+int64(len(marker)))
	out = append(out, c.head...)
	out = append(out, marker...)
	return append(out, tail...), true
}
