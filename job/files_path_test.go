package job

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestWorkspacePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"a/b.txt", "a/b.txt"},
		{"/workspace/a/b.txt", "a/b.txt"},
		{"/workspace", "."},
		{"/workspace/", "."},
		{"/workspacefoo/x", "workspacefoo/x"},
		{"/a//b/./c", "a/b/c"},
		{"", "."},
	} {
		got, err := workspacePath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"../x", "a/../../x", "/workspace/../etc", "a\x00b"} {
		if _, err := workspacePath(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("workspacePath(%q): err %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzWorkspacePath: a client's path is refused (ErrInvalid) or becomes a
// clean relative name without "..", within the kernel's path limits.
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"a/b.txt", "/workspace/x", "../x", "a/../../b", "", "/", "a\x00b", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, err := workspacePath(p)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v is not ErrInvalid", p, err)
			}
			return
		}
		if len(name) > maxPathBytes || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") || strings.ContainsRune(name, 0) {
			t.Fatalf("%q became %q", p, name)
		}
		for _, seg := range strings.Split(name, "/") {
			if len(seg) > maxPathSegBytes {
				t.Fatalf("%q: segment of %d bytes", p, len(seg))
			}
		}
	})
}
