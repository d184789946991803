package agent

import (
	"bytes"
	"strings"
	"testing"
)

func TestCapBuf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limit  int64
		writes []string
		want   string
		trunc  bool
	}{
		{"empty", 10, nil, "", false},
		{"fits", 10, []string{"abc", "defghij"}, "abcdefghij", false},
		{"head and tail", 4, []string{"ab", "cdef", "gh"}, "ab\n[... 4 bytes truncated ...]\ngh", true},
		{"one big write", 4, []string{"0123456789"}, "01\n[... 6 bytes truncated ...]\n89", true},
		{"many small writes", 6, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, "abc\n[... 4 bytes truncated ...]\nhij", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newCapBuf(tt.limit)
			for _, w := range tt.writes {
				b.Write([]byte(w))
			}
			got, trunc := b.Bytes()
			if string(got) != tt.want || trunc != tt.trunc {
				t.Errorf("got %q,%v want %q,%v", got, trunc, tt.want, tt.trunc)
			}
		})
	}
	// Long random-sized writes keep exactly the first and last halves.
	b := newCapBuf(100)
	var all bytes.Buffer
	for i := range 1000 {
		s := strings.Repeat(string(rune('a'+i%26)), i%37)
		b.Write([]byte(s))
		all.WriteString(s)
	}
	got, _ := b.Bytes()
	if !bytes.HasPrefix(got, all.Bytes()[:50]) || !bytes.HasSuffix(got, all.Bytes()[all.Len()-50:]) {
		t.Errorf("head/tail wrong: %q", got)
	}
}
