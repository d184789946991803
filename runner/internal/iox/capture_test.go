package iox

import (
	"bytes"
	"strings"
	"testing"
)

func TestCaptureHeadTail(t *testing.T) {
	t.Parallel()
	for _, chunk := range []int{1, 3, 7, 100, 5000} {
		c := NewCapture(10)
		var in bytes.Buffer
		for i := 0; i < 1000; i++ {
			in.WriteByte(byte('a' + i%26))
		}
		data := in.Bytes()
		for i := 0; i < len(data); i += chunk {
			_, _ = c.Write(data[i:min(i+chunk, len(data))])
		}
		out, trunc := c.Bytes()
		if !trunc {
			t.Fatalf("chunk %d: not truncated", chunk)
		}
		want := string(data[:5]) + "\n[... 990 bytes truncated ...]\n" + string(data[len(data)-5:])
		if string(out) != want {
			t.Fatalf("chunk %d: got %q want %q", chunk, out, want)
		}
	}
	c := NewCapture(10)
	_, _ = c.Write([]byte("0123456789"))
	if out, trunc := c.Bytes(); trunc || string(out) != "0123456789" {
		t.Fatalf("exact fit: %q %v", out, trunc)
	}
	c = NewCapture(0)
	_, _ = c.Write([]byte(strings.Repeat("x", 100)))
	if out, trunc := c.Bytes(); trunc || len(out) != 100 {
		t.Fatalf("unlimited: %d %v", len(out), trunc)
	}
}
