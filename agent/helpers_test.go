package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const testPython = "/usr/bin/python3"

// startServer runs Serve on a unix socket in a temp dir and returns a
// connected client and the root directory.
func startServer(t testing.TB, opts ServerOptions) (*Client, string) {
	t.Helper()
	dir := t.TempDir()
	if opts.Root == "" {
		opts.Root = filepath.Join(dir, "root")
		if err := os.Mkdir(opts.Root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if opts.PythonPath == "" {
		opts.PythonPath = testPython
	}
	if opts.Env == nil {
		opts.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, l, opts) }()
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	c, err := Dial(dctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return")
		}
	})
	return c, opts.Root
}

func needPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(testPython); err != nil {
		t.Skipf("%s not available", testPython)
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
