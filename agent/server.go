package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ServerOptions configures the agent side.
type ServerOptions struct {
	// Root confines file operations (os.Root) and is the default working
	// directory of exec and the REPL. Empty: file operations are refused
	// and processes start in "/".
	Root string
	// PythonPath is the interpreter of the persistent REPL; default /usr/bin/python3.
	PythonPath string
	// Env is the base environment of every process; ExecRequest.Env is
	// appended. The agent's own environment is never inherited.
	Env []string
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// CodeUser is who the code is: every process the agent starts (exec,
	// the REPL interpreter) runs as its uid and gid with no supplementary
	// groups, and files and directories the agent creates (write_file)
	// are owned by it. The agent needs CAP_SETUID, CAP_SETGID and
	// CAP_CHOWN for that, and CAP_KILL to kill the code's processes. nil:
	// processes run as the agent's own user and files stay the agent's.
	CodeUser *User
	// CgroupUsage: each exec's result carries the container's memory
	// cgroup as the agent reads it from inside: OOMKilled for a process
	// killed by SIGKILL while the cgroup counted an OOM kill, the CPU
	// time used meanwhile and the peak memory. For runners that cannot
	// read the cgroup from the host.
	CgroupUsage bool
	// KillStrays: when the last running exec ends, processes that left
	// the agent's session (setsid daemons) are killed. For runners that
	// cannot do it from the host; needs the agent alone in its pid
	// namespace.
	KillStrays bool

	// disableProcs answers exec and repl with an error (fuzzing).
	disableProcs bool
}

const serverWriteTimeout = 30 * time.Second // a client that does not read for this long is gone

// server is the state shared by all connections of one agent: the file
// root and the one persistent Python interpreter.
type server struct {
	opts     ServerOptions
	log      *slog.Logger
	root     *os.Root // nil when opts.Root is empty
	rootAbs  string
	repl     *pyREPL
	shutdown chan struct{}

	execs atomic.Int64 // running execs (KillStrays)

	heldMu     sync.Mutex
	held       *proc // started by prestart, waiting for its exec
	heldClosed bool
	stopOnce   sync.Once
}

func newServer(opts ServerOptions) (*server, error) {
	if opts.PythonPath == "" {
		opts.PythonPath = "/usr/bin/python3"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{opts: opts, log: log, shutdown: make(chan struct{})}
	dir := "/"
	if opts.Root != "" {
		abs, err := filepath.Abs(opts.Root)
		if err != nil {
			return nil, fmt.Errorf("agent root %q: %w", opts.Root, err)
		}
		r, err := os.OpenRoot(abs)
		if err != nil {
			return nil, fmt.Errorf("agent root: %w", err)
		}
		s.root, s.rootAbs, dir = r, abs, abs
	}
	s.repl = newPyREPL(opts.PythonPath, opts.Env, dir, opts.CodeUser, log)
	return s, nil
}

func (s *server) close() {
	s.heldMu.Lock()
	s.heldClosed = true
	s.heldMu.Unlock()
	s.dropHeld()
	s.repl.close()
	if s.root != nil {
		s.root.Close()
	}
}

func (s *server) requestShutdown() { s.stopOnce.Do(func() { close(s.shutdown) }) }

// Serve accepts connections on l until ctx ends or a client sends
// shutdown, then closes l, kills every process the agent started and
// returns nil. All connections share one Python interpreter.
func Serve(ctx context.Context, l net.Listener, opts ServerOptions) error {
	s, err := newServer(opts)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.shutdown:
		}
		cancel()
		l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("agent accept: %w", err)
		}
		wg.Go(func() { s.serveConn(ctx, conn) })
	}
}

// ServeConn serves one connection (e.g. stdin/stdout) until the peer goes
// away, ctx ends or the peer sends shutdown; then it kills every process
// it started and returns. The error tells why the connection ended (nil
// for a clean EOF, ctx end or shutdown).
func ServeConn(ctx context.Context, conn net.Conn, opts ServerOptions) error {
	s, err := newServer(opts)
	if err != nil {
		conn.Close()
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.shutdown:
			cancel()
		}
	}()
	return s.serveConn(ctx, conn)
}

// connState is one connection: a locked writer and the in-flight requests.
type connState struct {
	s    *server
	conn net.Conn
	wmu  sync.Mutex
	fail context.CancelFunc // ends the connection

	mu       sync.Mutex
	inflight map[uint64]*request
}

type request struct {
	cancel context.CancelFunc
	done   chan struct{}
	// stdin receives a long-lived exec's stdin chunks (nil: EOF); nil
	// for every other request.
	stdin chan []byte
	// kill is closed by a kill message for an exec (once: killOnce); nil
	// for every other request.
	kill     chan struct{}
	killOnce sync.Once
}

// stdinStall is how long the connection's reader waits for a long-lived
// process to take a stdin chunk before giving up on its stdin.
const stdinStall = 10 * time.Second

func (s *server) serveConn(ctx context.Context, conn net.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	c := &connState{s: s, conn: conn, fail: cancel, inflight: make(map[uint64]*request)}
	var wg sync.WaitGroup
	defer func() {
		cancel() // kills this connection's processes
		wg.Wait()
		conn.Close()
	}()
	go func() {
		<-ctx.Done()
		conn.SetReadDeadline(time.Unix(1, 0)) // unblock the reader
		conn.Close()
	}()
	var buf []byte
	for {
		f, b, err := readFrame(conn, buf)
		buf = b
		if len(buf) > 64<<10 {
			buf = nil
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			s.log.Warn("agent connection closed", "err", err)
			return err
		}
		if err := c.dispatch(ctx, &wg, f); err != nil {
			s.log.Warn("agent connection closed", "err", err)
			return err
		}
	}
}

// dispatch starts one request. An error closes the connection.
func (c *connState) dispatch(ctx context.Context, wg *sync.WaitGroup, f frame) error {
	switch f.Type {
	case typeStdin:
		c.feedStdin(f)
		return nil
	case typeKill:
		c.mu.Lock()
		r := c.inflight[f.Target]
		c.mu.Unlock()
		if r != nil && r.kill != nil {
			r.killOnce.Do(func() { close(r.kill) })
		}
		return nil
	}
	switch f.Type {
	case typeOutput, typeResult, typeError:
		return fmt.Errorf("%w: client sent %q", ErrProtocol, f.Type)
	case typePing, typeExec, typePrestart, typeREPLWarm, typeCancel, typeREPL, typeReadFile, typeWriteFile,
		typeListDir, typeListTree, typeStat, typeRemove, typeShutdown:
	default:
		c.reply(&frame{ID: f.ID, Type: typeError, Error: fmt.Sprintf("unknown message type %q", f.Type)})
		return nil
	}
	if f.ID == 0 {
		c.reply(&frame{Type: typeError, Error: "request without id"})
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	req := &request{cancel: cancel, done: make(chan struct{})}
	if f.Type == typeExec {
		req.kill = make(chan struct{})
		if f.Exec != nil && f.Exec.LongLived {
			req.stdin = make(chan []byte, 64)
		}
	}
	c.mu.Lock()
	switch {
	case c.inflight[f.ID] != nil:
		c.mu.Unlock()
		cancel()
		c.reply(&frame{ID: f.ID, Type: typeError, Error: "duplicate request id"})
		return nil
	case len(c.inflight) >= MaxInFlight:
		c.mu.Unlock()
		cancel()
		c.reply(&frame{ID: f.ID, Type: typeError, Error: "too many requests in flight"})
		return nil
	}
	c.inflight[f.ID] = req
	c.mu.Unlock()
	wg.Go(func() {
		defer func() {
			c.mu.Lock()
			delete(c.inflight, f.ID)
			c.mu.Unlock()
			cancel()
			close(req.done)
		}()
		resp := c.handle(rctx, f)
		resp.ID = f.ID
		c.reply(resp)
		if f.Type == typeShutdown {
			c.s.requestShutdown()
		}
	})
	return nil
}

// reply writes one frame; a write failure ends the connection.
func (c *connState) reply(f *frame) {
	b, err := encodeFrame(f)
	if err != nil {
		b, _ = encodeFrame(&frame{ID: f.ID, Type: typeError, Error: "encode response: " + err.Error()})
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(serverWriteTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.fail()
	}
}

// feedStdin hands a stdin chunk to its long-lived exec. A chunk for no
// such exec (finished, unknown) is dropped; a process that does not read
// its stdin for stdinStall loses it (its stdin is closed).
func (c *connState) feedStdin(f frame) {
	c.mu.Lock()
	r := c.inflight[f.Target]
	c.mu.Unlock()
	if r == nil || r.stdin == nil {
		return
	}
	chunk := f.Data
	if chunk == nil {
		chunk = []byte{}
	}
	if f.EOF {
		chunk = nil
	}
	t := time.NewTimer(stdinStall)
	defer t.Stop()
	select {
	case r.stdin <- chunk:
	case <-r.done:
	case <-t.C:
		c.s.log.Warn("a long-lived process does not read its stdin; closing it", "request", f.Target)
		c.mu.Lock()
		r.stdin = nil
		c.mu.Unlock()
	}
}

func (c *connState) emitter(id uint64) func(stream string, chunk []byte) {
	return func(stream string, chunk []byte) {
		c.reply(&frame{ID: id, Type: typeOutput, Stream: stream, Data: chunk})
	}
}

func errFrame(err error) *frame { return &frame{Type: typeError, Error: err.Error()} }

func (c *connState) handle(ctx context.Context, f frame) *frame {
	s := c.s
	switch f.Type {
	case typePing:
		return &frame{Type: typeResult}
	case typeShutdown:
		return &frame{Type: typeResult}
	case typeCancel:
		c.mu.Lock()
		target := c.inflight[f.Target]
		c.mu.Unlock()
		if target != nil && f.Target != f.ID {
			target.cancel()
			select {
			case <-target.done:
			case <-ctx.Done():
			}
		}
		return &frame{Type: typeResult}
	case typeExec:
		if f.Exec == nil || len(f.Exec.Args) == 0 {
			return errFrame(errors.New("exec: empty argv"))
		}
		if s.opts.disableProcs {
			return errFrame(errors.New("exec: disabled"))
		}
		c.mu.Lock()
		var stdin <-chan []byte
		var kill <-chan struct{}
		if r := c.inflight[f.ID]; r != nil {
			stdin, kill = r.stdin, r.kill
		}
		c.mu.Unlock()
		res, err := s.runExec(ctx, *f.Exec, c.emitter(f.ID), stdin, kill)
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult, ExecResult: &res}
	case typePrestart:
		if s.opts.disableProcs {
			return errFrame(errors.New("prestart: disabled"))
		}
		var req ExecRequest // none: drop the held process
		if f.Exec != nil {
			req = *f.Exec
		}
		if err := s.prestart(req); err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult}
	case typeREPLWarm:
		if s.opts.disableProcs {
			return errFrame(errors.New("repl: disabled"))
		}
		if err := s.repl.warmUp(); err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult}
	case typeREPL:
		if f.REPL == nil {
			return errFrame(errors.New("repl: missing request"))
		}
		if s.opts.disableProcs {
			return errFrame(errors.New("repl: disabled"))
		}
		s.dropHeld() // a cell finds no process held for an exec
		res, err := s.repl.run(ctx, *f.REPL, c.emitter(f.ID))
		if err != nil {
			return errFrame(err)
		}
		return &frame{Type: typeResult, REPLResult: &res}
	default:
		return s.fileOp(f)
	}
}
