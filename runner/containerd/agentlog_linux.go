package containerd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runner/internal/iox"
)

// agentLogLimit bounds what is kept of the agent's stdout and stderr
// (head and tail), for error messages.
const agentLogLimit = 64 << 10

// agentLog collects the agent's stdout and stderr, which the shim writes
// to a "file" (cio.LogFile) that is a FIFO drained here into a bounded
// buffer. A plain file would grow without bound: code in the sandbox runs
// as the agent's uid and can write to /proc/1/fd/1.
type agentLog struct {
	path string
	r, w *os.File // w: our writer, held until the shim has opened its own
	buf  *iox.Capture
	done chan struct{} // closed at EOF (every writer closed)
}

// newAgentLog creates the FIFO at path and starts draining it.
func newAgentLog(path string) (*agentLog, error) {
	os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("agent log fifo: %w", err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("agent log fifo: %w", err)
	}
	// Until the shim opens it, a reader would see EOF: hold a writer.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("agent log fifo: %w", err)
	}
	l := &agentLog{path: path, r: r, w: w, buf: iox.NewCapture(agentLogLimit), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		io.Copy(l.buf, r)
	}()
	return l, nil
}

// opened drops our writer once the shim holds its own (after the task
// was created), so the drain ends when the agent's output does.
func (l *agentLog) opened() {
	if l != nil && l.w != nil {
		l.w.Close()
		l.w = nil
	}
}

// tail returns what was kept, waiting up to wait for the end of the
// output (the task exited and the shim closed the log).
func (l *agentLog) tail(wait time.Duration) string {
	if l == nil {
		return ""
	}
	select {
	case <-l.done:
	case <-time.After(wait):
	}
	b, truncated := l.buf.Bytes()
	if truncated {
		return "(agent log truncated)\n" + string(b)
	}
	return string(b)
}

// close stops draining and removes the FIFO.
func (l *agentLog) close() error {
	if l == nil {
		return nil
	}
	l.opened()
	l.r.Close()
	if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
