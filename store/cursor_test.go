package store

import "testing"

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	c := encodeCursor(1764475200123456789, "job_01:x")
	ts, id, err := decodeCursor(c)
	if err != nil || ts != 1764475200123456789 || id != "job_01:x" {
		t.Fatalf("decode(%q) = %d %q %v", c, ts, id, err)
	}
}

// FuzzDecodeCursor: a cursor comes from clients; any input is an error or
// a position, never a panic.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(1, "a"))
	f.Add("")
	f.Add("!!")
	f.Add("MTox")
	f.Fuzz(func(t *testing.T, s string) {
		ts, id, err := decodeCursor(s)
		if err == nil && encodeCursor(ts, id) == "" {
			t.Fatal("decoded cursor does not encode")
		}
	})
}
