package job

import (
	"errors"
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
