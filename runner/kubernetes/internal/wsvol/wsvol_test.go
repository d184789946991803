package wsvol

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/workspace"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		attrs map[string]string
		want  workspace.Limits
		err   string
	}{
		{attrs: nil},
		{attrs: map[string]string{"bytes": "33554432", "inodes": "512", AttrEphemeral: "true", "csi.storage.k8s.io/pod.name": "p"}, want: workspace.Limits{Bytes: 32 << 20, Inodes: 512}},
		{attrs: map[string]string{"bytes": "1k"}, err: "positive decimal"},
		{attrs: map[string]string{"bytes": "-5"}, err: "positive decimal"},
		{attrs: map[string]string{"bytes": "0"}, err: "positive decimal"},
		{attrs: map[string]string{"bytes": "1000"}, err: "below the minimum"},
		{attrs: map[string]string{"inodes": "3"}, err: "below the minimum"},
		{attrs: map[string]string{"byte": "33554432"}, err: `unknown volume attribute "byte"`},
		{attrs: map[string]string{"bytes": "137438953472"}, err: "above this driver's maximum"},
		{attrs: map[string]string{}, err: ""}, // the default (1 GiB) is within the cap
	} {
		got, err := Parse(tc.attrs, 64<<30)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("Parse(%v) = %+v, %v; want %+v", tc.attrs, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Parse(%v) = %v; want an error with %q", tc.attrs, err, tc.err)
		}
	}
	if _, err := Parse(nil, 100<<20); err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("the default size above a small cap: %v", err)
	}
}

// FuzzParse: whatever a pod's spec carries, Parse answers limits that
// pass workspace.Limits.Check and the cap, or an error; it never panics.
func FuzzParse(f *testing.F) {
	f.Add("bytes", "33554432", "inodes", "512")
	f.Add("bytes", "9223372036854775807", "x", "")
	f.Add(AttrEphemeral, "true", "inodes", "1e3")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		l, err := Parse(map[string]string{k1: v1, k2: v2}, 1<<30)
		if err != nil {
			return
		}
		if cerr := l.Check(); cerr != nil {
			t.Fatalf("Parse accepted %+v: %v", l, cerr)
		}
		if e := l.Effective(); e.Bytes > 1<<30 {
			t.Fatalf("Parse accepted %d bytes above the cap", e.Bytes)
		}
	})
}

// TestAttributesRoundTrip: what the runner writes is what the driver
// reads, the defaults filled in.
func TestAttributesRoundTrip(t *testing.T) {
	for _, l := range []workspace.Limits{{}, {Bytes: 32 << 20, Inodes: 512}, {Bytes: 64 << 20}} {
		got, err := Parse(Attributes(l), 0)
		if err != nil || got != l.Effective() {
			t.Errorf("Parse(Attributes(%+v)) = %+v, %v; want %+v", l, got, err, l.Effective())
		}
	}
}
