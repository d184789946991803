package ids

import (
	"regexp"
	"slices"
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	t.Parallel()
	long := regexp.MustCompile(`^job_[0-9a-hjkmnp-tv-z]{26}$`)
	short := regexp.MustCompile(`^sbx-[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 1000 {
		n, s := New("job_"), Short("sbx-")
		if !long.MatchString(n) || !short.MatchString(s) {
			t.Fatalf("New %q, Short %q", n, s)
		}
		if seen[n] || seen[s] {
			t.Fatalf("duplicate %q or %q", n, s)
		}
		seen[n], seen[s] = true, true
	}
}

// IDs made later sort after earlier ones (millisecond resolution).
func TestNewSortsByTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 30, 4, 49, 29, 0, time.UTC)
	var ids []string
	for i := range 100 {
		ids = append(ids, At("ses_", base.Add(time.Duration(i)*time.Millisecond)))
	}
	if !slices.IsSorted(ids) {
		t.Fatalf("not sorted: %v", ids)
	}
	a, b := At("", base), At("", base)
	if a[:9] != b[:9] {
		t.Fatalf("the timestamp part differs for the same millisecond: %q, %q", a, b)
	}
	if a == b {
		t.Fatalf("two IDs of the same millisecond are equal: %q", a)
	}
}
