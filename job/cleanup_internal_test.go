package job

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A path that keeps failing is retried later and later (doubling, up to
// the cap); one that goes leaves the list.
func TestCleanupsBackoff(t *testing.T) {
	t.Parallel()
	c := newCleanups(slog.New(slog.DiscardHandler))
	c.min, c.max = 10*time.Millisecond, 40*time.Millisecond
	// A path with a NUL byte: RemoveAll fails on it everywhere, as
	// non-root (TestCleanupRetried uses chattr +i, as root).
	bad := "bad\x00path"
	var waits []time.Duration
	for range 4 {
		before := time.Now()
		if err := c.remove(bad); err == nil {
			t.Fatal("removed a path with a NUL byte")
		}
		waits = append(waits, c.pending[bad].next.Sub(before).Round(10*time.Millisecond))
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("retry waits %v, want %v", waits, want)
		}
	}
	if n, _ := c.stats(); n != 1 || c.pending[bad].attempts != 4 {
		t.Fatalf("pending %d, attempts %d", n, c.pending[bad].attempts)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "f"), make([]byte, 10), 0o644)
	c.pending[dir] = &pendingCleanup{bytes: 10}
	if n, b := c.stats(); n != 2 || b != 10 {
		t.Fatalf("stats %d %d", n, b)
	}
	if err := c.remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.pending[dir]; ok {
		t.Fatal("a removed path is still pending")
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { c.run(quit); close(done) }()
	time.Sleep(100 * time.Millisecond) // the loop retries bad a few times
	close(quit)
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[bad].attempts <= 4 {
		t.Fatalf("the loop did not retry: attempts %d", c.pending[bad].attempts)
	}
}
