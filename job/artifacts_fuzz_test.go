package job

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

var safeName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// FuzzArtifactName: whatever name sandboxed code gives an artifact, the
// stored name is a plain file name (one URL path segment, no dot first).
func FuzzArtifactName(f *testing.F) {
	for _, s := range []string{"figure-1.png", "../../etc/passwd", ".hidden", "", "a/b", "x y", "é.png", strings.Repeat("a", 300)} {
		f.Add(s, "image/png")
	}
	f.Fuzz(func(t *testing.T, name, mimeType string) {
		got := uniqueName(artifactName(name, mimeType, 3), map[string]bool{"figure-1.png": true})
		if !safeName.MatchString(got) || len(got) > maxArtifactName+32 {
			t.Fatalf("artifactName(%q, %q) = %q", name, mimeType, got)
		}
	})
}

// FuzzCapText: a capped text is within its limit plus the marker, keeps
// its head and tail, and stays valid UTF-8 when it was.
func FuzzCapText(f *testing.F) {
	f.Add("hello world", int64(4))
	f.Add(strings.Repeat("é", 100), int64(7))
	f.Fuzz(func(t *testing.T, s string, limit int64) {
		if limit < 2 || limit > 1<<20 {
			return
		}
		got := s
		cut := capText(&got, limit)
		if !cut {
			if got != s || int64(len(s)) > limit {
				t.Fatalf("uncut %q (limit %d) = %q", s, limit, got)
			}
			return
		}
		if int64(len(got)) > limit+64 || !strings.Contains(got, " bytes truncated ...]") {
			t.Fatalf("capText(%d bytes, %d) = %d bytes", len(s), limit, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("capText broke UTF-8: %q", got)
		}
		head, _, _ := strings.Cut(got, "\n[... ")
		if !strings.HasPrefix(s, head) {
			t.Fatalf("head %q is not a prefix", head)
		}
	})
}
