package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

const (
	clientWriteTimeout = 10 * time.Second // a single frame write; a peer not reading is dead
	responseGrace      = 10 * time.Second // past a request's own timeout, the agent is considered hung
	cancelWait         = 2 * time.Second  // how long a cancelled Exec waits for the kill to be confirmed
	dialRetry          = 20 * time.Millisecond
)

// Client is the sandboxd side of the agent protocol. It multiplexes any
// number of concurrent requests over one connection. Every frame from the
// agent is untrusted: garbage closes the connection and fails all calls
// with ErrClosed; no method blocks past its ctx. Safe for concurrent use.
type Client struct {
	conn net.Conn
	wmu  sync.Mutex // serialises frame writes

	mu     sync.Mutex
	calls  map[uint64]*call
	nextID uint64
	err    error // why the connection ended; set once

	done      chan struct{} // closed when the reader goroutine exits
	closeOnce sync.Once
}

// call is one request waiting for its answer.
type call struct {
	events chan *frame   // output frames; nil for requests that stream nothing
	result chan frame    // the final result or error; buffered(1)
	gone   chan struct{} // closed when the caller stopped listening
}

// NewClient takes ownership of conn and starts the reader goroutine. Call
// Close to release it.
func NewClient(conn net.Conn) *Client {
	c := &Client{conn: conn, calls: make(map[uint64]*call), done: make(chan struct{})}
	go c.readLoop()
	return c
}

// Dial connects to the agent's unix socket, retrying until ctx ends
// (the agent may still be starting, or a stale socket file may refuse).
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", socketPath)
		if err == nil {
			return NewClient(conn), nil
		}
		t := time.NewTimer(dialRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial agent %s: %w (last error: %v)", socketPath, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Close closes the connection; pending calls fail with ErrClosed.
// Processes the agent runs for this connection are killed by the agent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() { err = c.conn.Close() })
	c.fail(ErrClosed)
	<-c.done
	return err
}

// Done is closed when the connection is gone; Err then tells why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is usable.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.closeOnce.Do(func() { c.conn.Close() })
}

func (c *Client) readLoop() {
	defer close(c.done)
	var buf []byte
	for {
		var f frame
		var err error
		f, buf, err = readFrame(c.conn, buf)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
			} else {
				c.fail(fmt.Errorf("%w: %v", ErrClosed, err))
			}
			return
		}
		if len(buf) > 64<<10 {
			buf = nil // don't pin a big buffer after a big frame
		}
		if f.Type != typeOutput && f.Type != typeResult && f.Type != typeError {
			c.fail(fmt.Errorf("%w: %w: unexpected frame type %q", ErrClosed, ErrProtocol, f.Type))
			return
		}
		c.mu.Lock()
		cl := c.calls[f.ID]
		if cl != nil && (f.Type == typeResult || f.Type == typeError) {
			delete(c.calls, f.ID)
		}
		c.mu.Unlock()
		if cl == nil {
			continue // late answer to a call we gave up on
		}
		switch f.Type {
		case typeOutput:
			if cl.events == nil || (f.Stream != "stdout" && f.Stream != "stderr") {
				continue
			}
			select {
			case cl.events <- &f:
			case <-cl.gone:
			}
		default: // result or error
			cl.result <- f
		}
	}
}

// start registers a call and sends its request frame.
func (c *Client) start(ctx context.Context, f *frame, stream bool) (uint64, *call, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	cl := &call{result: make(chan frame, 1), gone: make(chan struct{})}
	if stream {
		cl.events = make(chan *frame, 32)
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = cl
	c.mu.Unlock()
	f.ID = id
	if err := c.send(f); err != nil {
		c.forget(id, cl)
		return 0, nil, err
	}
	return id, cl, nil
}

func (c *Client) forget(id uint64, cl *call) {
	c.mu.Lock()
	if c.calls[id] == cl {
		delete(c.calls, id)
	}
	c.mu.Unlock()
	close(cl.gone)
}

func (c *Client) send(f *frame) error {
	b, err := encodeFrame(f)
	if err != nil {
		return fmt.Errorf("agent: encode %s: %w", f.Type, err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	c.conn.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
	if _, err := c.conn.Write(b); err != nil {
		// A partial write leaves the stream unusable.
		c.fail(fmt.Errorf("%w: write: %v", ErrClosed, err))
		return c.Err()
	}
	return nil
}

// wait waits for the answer to call id, delivering output events to
// onOutput in order, at most outLimit bytes per stream (a hostile agent
// cannot flood the caller). limit > 0 bounds the wait (the agent is hung).
func (c *Client) wait(ctx context.Context, id uint64, cl *call, onOutput func(string, []byte), outLimit int64, limit time.Duration) (frame, error) {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	var delivered [2]int64
	deliver := func(ev *frame) {
		if onOutput == nil {
			return
		}
		i := 0
		if ev.Stream == "stderr" {
			i = 1
		}
		data := ev.Data
		if room := outLimit - delivered[i]; int64(len(data)) > room {
			data = data[:max(room, 0)]
		}
		if len(data) > 0 {
			delivered[i] += int64(len(data))
			onOutput(ev.Stream, data)
		}
	}
	finish := func(f frame) (frame, error) {
		// Output frames precede their result on the wire; flush any
		// still queued so the caller sees them in order.
		for {
			select {
			case ev := <-cl.events:
				deliver(ev)
				continue
			default:
			}
			break
		}
		close(cl.gone)
		if f.Type == typeError {
			return f, &RemoteError{Msg: f.Error} // the caller fills in Op
		}
		return f, nil
	}
	for {
		select {
		case ev := <-cl.events:
			deliver(ev)
		case f := <-cl.result:
			return finish(f)
		case <-ctx.Done():
			c.forget(id, cl)
			return frame{}, ctx.Err()
		case <-timeout:
			c.forget(id, cl)
			return frame{}, ErrNoResponse
		case <-c.done:
			select {
			case f := <-cl.result: // answered just before the connection ended
				return finish(f)
			default:
			}
			c.forget(id, cl)
			return frame{}, c.Err()
		}
	}
}

// do is a plain request/response round trip.
func (c *Client) do(ctx context.Context, req *frame) (frame, error) {
	id, cl, err := c.start(ctx, req, false)
	if err != nil {
		return frame{}, err
	}
	f, err := c.wait(ctx, id, cl, nil, 0, 0)
	var re *RemoteError
	if errors.As(err, &re) {
		re.Op = req.Type
	}
	return f, err
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.do(ctx, &frame{Type: typePing})
	return err
}

// Exec runs a process in the sandbox. Its exit status, signal and timeout
// are reported in ExecResult; error is for infrastructure faults.
// Cancelling ctx sends a cancel frame (the agent kills the process group)
// and returns ctx.Err() once the kill is confirmed or cancelWait passed.
// onOutput, if not nil, receives output chunks in order, from the calling
// goroutine, as they arrive; it is never called after Exec returns.
func (c *Client) Exec(ctx context.Context, req ExecRequest, onOutput func(stream string, chunk []byte)) (ExecResult, error) {
	if len(req.Args) == 0 {
		return ExecResult{}, errors.New("agent: exec: empty argv")
	}
	var f frame
	var err error
	if req.LongLived {
		f, err = c.execLongLived(ctx, req, onOutput)
	} else {
		f, err = c.stream(ctx, &frame{Type: typeExec, Exec: &req}, req.Timeout, req.OutputLimit, req.Stop, onOutput)
	}
	if err != nil {
		return ExecResult{}, err
	}
	if f.ExecResult == nil {
		return ExecResult{}, fmt.Errorf("%w: exec result missing", ErrProtocol)
	}
	return *f.ExecResult, nil
}

// Prestart starts req's process now and holds it, waiting on its stdin,
// for the next Exec of the same request (same args, env, dir and output
// limit, with stdin): that Exec writes its stdin to the held process, and
// its timeout and duration count from then, so its result is the one a
// process started at that moment would give, less the start-up time. Any
// other Exec, and a later Prestart, discard the held process first (the
// sandbox then looks as if it had never been started). req must not carry
// stdin or be long-lived. A nil req discards the held process.
func (c *Client) Prestart(ctx context.Context, req *ExecRequest) error {
	_, err := c.do(ctx, &frame{Type: typePrestart, Exec: req})
	return err
}

// WarmREPL starts the persistent interpreter ahead of the first cell, so
// that cell does not wait for Python to start. An exec before any cell
// kills it again (the sandbox then looks as if no REPL had been started);
// a cell drops a process held by Prestart.
func (c *Client) WarmREPL(ctx context.Context) error {
	_, err := c.do(ctx, &frame{Type: typeREPLWarm})
	return err
}

// REPL runs a cell in the agent's persistent Python interpreter. Exceptions,
// timeouts and restarts are reported in REPLResult. Cancelling ctx
// interrupts the cell like a timeout. onOutput is as for Exec.
func (c *Client) REPL(ctx context.Context, req REPLRequest, onOutput func(stream string, chunk []byte)) (REPLResult, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultREPLTimeout
	}
	f, err := c.stream(ctx, &frame{Type: typeREPL, REPL: &req}, timeout, req.OutputLimit, nil, onOutput)
	if err != nil {
		return REPLResult{}, err
	}
	if f.REPLResult == nil {
		return REPLResult{}, fmt.Errorf("%w: repl result missing", ErrProtocol)
	}
	return *f.REPLResult, nil
}

// stream runs a request that streams output and can be cancelled; closing
// stop (nil: never) sends it a kill message.
func (c *Client) stream(ctx context.Context, req *frame, timeout time.Duration, outLimit int64, stop <-chan struct{}, onOutput func(string, []byte)) (frame, error) {
	id, cl, err := c.start(ctx, req, true)
	if err != nil {
		return frame{}, err
	}
	defer c.killOn(stop, id)()
	var limit time.Duration
	if timeout > 0 {
		limit = timeout + responseGrace
	}
	f, err := c.wait(ctx, id, cl, onOutput, clampLimit(outLimit), limit)
	if err == nil {
		return f, nil
	}
	var re *RemoteError
	if errors.As(err, &re) {
		re.Op = req.Type
		return f, err
	}
	if ctx.Err() != nil || errors.Is(err, ErrNoResponse) {
		c.cancelRemote(context.WithoutCancel(ctx), id)
	}
	return frame{}, err
}

// execLongLived runs a LongLived exec: no deadline but ctx, every output
// chunk delivered, and StdinStream sent in stdin frames as it is read.
func (c *Client) execLongLived(ctx context.Context, req ExecRequest, onOutput func(string, []byte)) (frame, error) {
	if req.Timeout != 0 {
		return frame{}, errors.New("agent: exec: a long-lived exec has no timeout")
	}
	in := req.StdinStream
	id, cl, err := c.start(ctx, &frame{Type: typeExec, Exec: &req}, true)
	if err != nil {
		return frame{}, err
	}
	defer c.killOn(req.Stop, id)()
	if in != nil {
		go c.sendStdin(id, cl, in)
	}
	f, err := c.wait(ctx, id, cl, onOutput, math.MaxInt64, 0)
	if err == nil {
		return f, nil
	}
	var re *RemoteError
	if errors.As(err, &re) {
		re.Op = typeExec
		return f, err
	}
	if ctx.Err() != nil {
		c.cancelRemote(context.WithoutCancel(ctx), id)
	}
	return frame{}, err
}

// killOn sends exec id a kill message when stop is closed, until the
// returned func is called. A nil stop costs nothing.
func (c *Client) killOn(stop <-chan struct{}, id uint64) (end func()) {
	if stop == nil {
		return func() {}
	}
	ended := make(chan struct{})
	go func() {
		select {
		case <-stop:
			_ = c.send(&frame{Type: typeKill, Target: id}) // a failed send ends the connection, and the exec with it
		case <-ended:
		}
	}()
	return func() { close(ended) }
}

// sendStdin forwards in to exec id until EOF, then closes its stdin; it
// stops when the call ends.
func (c *Client) sendStdin(id uint64, cl *call, in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		select {
		case <-cl.gone:
			return
		default:
		}
		if n > 0 {
			if c.send(&frame{Type: typeStdin, Target: id, Data: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
		}
		if err != nil {
			_ = c.send(&frame{Type: typeStdin, Target: id, EOF: true})
			return
		}
	}
}

// cancelRemote asks the agent to kill request id. The agent answers the
// cancel once the target has finished (or at once if it is unknown), so
// this waits at most cancelWait for the kill to be confirmed.
func (c *Client) cancelRemote(ctx context.Context, id uint64) {
	ctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	c.do(ctx, &frame{Type: typeCancel, Target: id})
}

// ReadFile reads a file below the agent's root. A file larger than
// maxBytes (clamped to MaxReadFileBytes; 0 means that maximum) is an error.
func (c *Client) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	f, err := c.do(ctx, &frame{Type: typeReadFile, Path: path, MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	if f.Data == nil {
		return []byte{}, nil
	}
	return f.Data, nil
}

// WriteFile writes a file below the agent's root, creating missing parent
// directories (mkdir -p). mode 0 means 0644.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	_, err := c.do(ctx, &frame{Type: typeWriteFile, Path: path, Data: data, Mode: uint32(mode.Perm())})
	return err
}

// ListDir lists a directory below the agent's root, sorted by name.
func (c *Client) ListDir(ctx context.Context, path string) ([]FileInfo, error) {
	f, err := c.do(ctx, &frame{Type: typeListDir, Path: path})
	if err != nil {
		return nil, err
	}
	return f.Files, nil
}

// ListTree lists everything below a directory in one request, each
// entry named by its slash path relative to it, parents before their
// children (symlinks listed, not followed; at most 20,000 entries).
// ErrUnsupported from an agent older than the request: walk with ListDir.
func (c *Client) ListTree(ctx context.Context, path string) ([]FileInfo, error) {
	f, err := c.do(ctx, &frame{Type: typeListTree, Path: path})
	if err != nil {
		if re := (*RemoteError)(nil); errors.As(err, &re) && strings.HasPrefix(re.Msg, "unknown message type") {
			return nil, fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
		}
		return nil, err
	}
	return f.Files, nil
}

// Stat describes one path below the agent's root (symlinks not followed).
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	f, err := c.do(ctx, &frame{Type: typeStat, Path: path})
	if err != nil {
		return FileInfo{}, err
	}
	if f.Info == nil {
		return FileInfo{}, fmt.Errorf("%w: stat result missing", ErrProtocol)
	}
	return *f.Info, nil
}

// Remove removes a path below the agent's root; recursive removes a
// directory tree (rm -rf). The root itself cannot be removed.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := c.do(ctx, &frame{Type: typeRemove, Path: path, Recursive: recursive})
	return err
}

// Shutdown asks the agent to kill everything it runs and exit. The agent
// answers before it goes away.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.do(ctx, &frame{Type: typeShutdown})
	return err
}
