package agent

import (
	"fmt"
	"slices"
)

func clampLimit(n int64) int64 {
	switch {
	case n <= 0:
		return DefaultOutputLimit
	case n > MaxOutputLimit:
		return MaxOutputLimit
	}
	return n
}

// capBuf keeps at most limit bytes of a stream: the first half and the
// last half, with a marker saying how much was dropped in between.
type capBuf struct {
	limit      int64
	head, tail []byte
	total      int64
}

func newCapBuf(limit int64) *capBuf { return &capBuf{limit: clampLimit(limit)} }

func (b *capBuf) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	headMax := int(b.limit / 2)
	if room := headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	tailMax := int(b.limit) - headMax
	if len(p) >= tailMax {
		b.tail = append(b.tail[:0], p[len(p)-tailMax:]...)
		return n, nil
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*tailMax {
		copy(b.tail, b.tail[len(b.tail)-tailMax:])
		b.tail = b.tail[:tailMax]
	}
	return n, nil
}

// Bytes returns the kept output and whether anything was dropped.
func (b *capBuf) Bytes() ([]byte, bool) {
	if b.total <= b.limit {
		if len(b.head)+len(b.tail) == 0 {
			return nil, false
		}
		return slices.Concat(b.head, b.tail), false
	}
	tailMax := int(b.limit) - len(b.head)
	tail := b.tail
	if len(tail) > tailMax {
		tail = tail[len(tail)-tailMax:]
	}
	dropped := b.total - int64(len(b.head)) - int64(len(tail))
	marker := fmt.Sprintf("\n[... %d bytes truncated ...]\n", dropped)
	return slices.Concat(b.head, []byte(marker), tail), true
}
