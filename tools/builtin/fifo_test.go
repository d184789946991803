//go:build unix

package builtin

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// TestFIFODoesNotHang: code in the sandbox can plant a FIFO in the
// workspace; the in-process file tools must refuse or skip it, not block in
// open(2) forever.
func TestFIFODoesNotHang(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	env := tools.Env{Workspace: ws}
	for _, c := range []struct {
		tool string
		args map[string]any
		ok   bool
	}{
		{"read_file", map[string]any{"path": "pipe"}, false},
		{"write_file", map[string]any{"path": "pipe", "content": "x"}, false},
		{"str_replace", map[string]any{"path": "pipe", "old_string": "a", "new_string": "b"}, false},
		{"file_info", map[string]any{"path": "pipe"}, true},
		{"grep_search", map[string]any{"pattern": "x"}, true},
		{"grep_search", map[string]any{"pattern": "x", "path": "pipe"}, true},
		{"list_dir", map[string]any{}, true},
	} {
		done := make(chan tools.Result, 1)
		go func() { done <- run(t, c.tool, env, c.args) }()
		select {
		case r := <-done:
			if r.OK != c.ok {
				t.Errorf("%s %v: %+v", c.tool, c.args, r)
			}
			if c.tool == "file_info" && !strings.Contains(r.Content, `"type": "other"`) {
				t.Errorf("file_info of a FIFO: %s", r.Content)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s %v blocked on a FIFO", c.tool, c.args)
		}
	}
}
