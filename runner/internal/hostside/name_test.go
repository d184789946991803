package hostside

import (
	"regexp"
	"strings"
	"testing"
)

// The matchers were regexps; they must accept exactly what those did.
var (
	idRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	labelRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-/]{0,127}$`)
)

func TestValidNames(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "a", "A9", "9", "_a", ".a", "-a", "/a", "a/b", "a_b.c-d", "a b", "a\n", "é", "a\x00",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"sbx-0123456789abcdef", "tenant/x", "a:b",
	} {
		if got, want := ValidID(s), idRE.MatchString(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
		if got, want := validLabel(s), labelRE.MatchString(s); got != want {
			t.Errorf("validLabel(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzValidNames(f *testing.F) {
	for _, s := range []string{"a", "a/b", "-", "a.b_c-d", strings.Repeat("z", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidID(s) != idRE.MatchString(s) || validLabel(s) != labelRE.MatchString(s) {
			t.Fatalf("%q: ValidID %v (regexp %v), validLabel %v (regexp %v)",
				s, ValidID(s), idRE.MatchString(s), validLabel(s), labelRE.MatchString(s))
		}
	})
}
