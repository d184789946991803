package hostside

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
)

func TestCanonicalImageRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sandboxd/python":                                   "docker.io/sandboxd/python:latest",
		"sandboxd/python:latest":                            "docker.io/sandboxd/python:latest",
		"docker.io/sandboxd/python:latest":                  "docker.io/sandboxd/python:latest",
		"debian":                                            "docker.io/library/debian:latest",
		"library/debian:bookworm":                           "docker.io/library/debian:bookworm",
		"registry.example.com:5000/a/b:1":                   "registry.example.com:5000/a/b:1",
		"sandboxd/python@sha256:" + strings.Repeat("a", 64): "docker.io/sandboxd/python@sha256:" + strings.Repeat("a", 64),
	} {
		got, err := CanonicalImageRef(in)
		if err != nil || got != want {
			t.Errorf("CanonicalImageRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "sandboxd/Python", "UPPER", "a b", "sandboxd/python:", ":latest", "a//b", "-a", "a:b:c", "sandboxd/python@sha256:zz",
		strings.Repeat("a", 300), strings.Repeat("a", 64), "../etc", "/abs/path", "a\x00b"} {
		if got, err := CanonicalImageRef(bad); err == nil || !errors.Is(err, runner.ErrInvalidSpec) {
			t.Errorf("CanonicalImageRef(%q) = %q, %v; want ErrInvalidSpec", bad, got, err)
		}
	}
}

// FuzzCanonicalImageRef: an accepted reference is a fixed point, and
// never carries a character outside the reference grammar.
func FuzzCanonicalImageRef(f *testing.F) {
	for _, s := range []string{"sandboxd/python", "debian:bookworm", "a/b@sha256:" + strings.Repeat("0", 64), "UPPER", "registry.example.com:5000/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := CanonicalImageRef(s)
		if err != nil {
			return
		}
		again, err := CanonicalImageRef(c)
		if err != nil || again != c {
			t.Fatalf("%q -> %q -> %q, %v", s, c, again, err)
		}
		if strings.ContainsAny(c, " \t\n\x00\"'`$\\") {
			t.Fatalf("%q -> %q", s, c)
		}
	})
}
