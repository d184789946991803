package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// pipeDrain bounds how long output is still read after the process
	// group was killed (a process that escaped with setsid may hold it).
	pipeDrain = time.Second
)

// runExec runs one process in its own process group. When it exits, times
// out, is killed (kill closed) or ctx ends, the whole group is killed with SIGKILL: background
// leftovers do not outlive the exec (use setsid to detach on purpose).
//
// A process held by prestart serves the exec when it was started for the
// same request (held.matches); any other exec discards it first, so the
// exec sees the sandbox as if nothing had been started ahead of it.
func (s *server) runExec(ctx context.Context, req ExecRequest, emit func(string, []byte), stdin <-chan []byte, kill <-chan struct{}) (ExecResult, error) {
	before, cpu0 := int64(-1), time.Duration(0)
	if s.opts.CgroupUsage {
		before = oomKills()
		cpu0, _ = cgroupUsage()
	}
	s.execs.Add(1)
	res, err := s.runExecOnce(ctx, req, emit, stdin, kill)
	if s.execs.Add(-1) == 0 && s.opts.KillStrays {
		if n := killStrays(); n > 0 {
			s.log.Debug("killed processes that left the agent's session", "count", n)
		}
	}
	if s.opts.CgroupUsage {
		res.OOMKilled = before >= 0 && res.Signal == "SIGKILL" && !res.TimedOut && oomKills() > before
		cpu1, peak := cgroupUsage()
		res.CPU, res.PeakMemory = max(cpu1-cpu0, 0), peak
	}
	return res, err
}

func (s *server) runExecOnce(ctx context.Context, req ExecRequest, emit func(string, []byte), stdin <-chan []byte, kill <-chan struct{}) (ExecResult, error) {
	s.repl.dropWarm() // an exec finds no interpreter that no cell used
	if p := s.takeHeld(); p != nil {
		if p.matches(req) && p.alive() {
			return p.finish(ctx, req, emit, stdin, kill)
		}
		p.discard()
	}
	p, res, err := s.startProc(req)
	if p == nil {
		return res, err
	}
	return p.finish(ctx, req, emit, stdin, kill)
}

// proc is a started process whose output is being collected.
type proc struct {
	req     ExecRequest // as started (Stdin not yet written for a held one)
	cmd     *exec.Cmd
	pid     int
	start   time.Time
	stdinW  *os.File // nil: the process has no stdin pipe
	closers []io.Closer
	limit   int64
	held    bool // started by prestart: the exec's clock starts at finish

	emitMu   sync.Mutex
	emit     func(string, []byte) // set by finish; output before it is kept and replayed
	streams  [2]procStream
	readers  sync.WaitGroup
	waitDone chan struct{} // closed when cmd.Wait returned
}

type procStream struct {
	name     string
	r, w     *os.File
	buf      *capBuf
	streamed int64
	early    [][]byte // output read before emit was set (a held process)
}

// startProc starts req's process (pipes, output readers, Wait). A nil proc
// comes with the result of a process that could not start (127, 126) or
// an error; held marks a prestarted process: its stdin pipe stays open
// until finish writes the request's.
func (s *server) startProc(req ExecRequest) (*proc, ExecResult, error) {
	return s.startProcHeld(req, false)
}

func (s *server) startProcHeld(req ExecRequest, held bool) (*proc, ExecResult, error) {
	start := time.Now()
	env := make([]string, 0, len(s.opts.Env)+len(req.Env))
	env = append(append(env, s.opts.Env...), req.Env...)
	dir := s.execDir(req.Dir)
	path, err := lookPath(req.Args[0], env, dir)
	if err != nil {
		return nil, startFailure(err, start), nil
	}
	cmd := &exec.Cmd{Path: path, Args: req.Args, Env: env, Dir: dir,
		SysProcAttr: s.opts.CodeUser.sysProcAttr()}
	p := &proc{req: req, cmd: cmd, start: start, limit: clampLimit(req.OutputLimit), held: held, waitDone: make(chan struct{})}
	p.streams[0].name, p.streams[1].name = "stdout", "stderr"
	ok := false
	defer func() {
		if !ok {
			p.closeAll()
		}
	}()
	if req.LongLived {
		p.req.Timeout = 0
	}
	var stdinR *os.File
	if len(req.Stdin) > 0 || req.LongLived || held {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		cmd.Stdin, stdinR, p.stdinW = r, r, w
		p.closers = append(p.closers, r, w)
	}
	for i := range p.streams {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		p.streams[i].r, p.streams[i].w, p.streams[i].buf = r, w, newCapBuf(p.limit)
		p.closers = append(p.closers, r, w)
	}
	cmd.Stdout, cmd.Stderr = p.streams[0].w, p.streams[1].w

	started, err := s.opts.CodeUser.wrap(cmd)
	if err != nil {
		return nil, ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	err = procs.start(cmd)
	started()
	if err != nil {
		return nil, startFailure(err, start), nil
	}
	ok = true
	p.pid = cmd.Process.Pid
	// Only the child keeps the write ends now.
	p.streams[0].w.Close()
	p.streams[1].w.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	for i := range p.streams {
		p.readers.Go(func() { p.read(&p.streams[i]) })
	}
	go func() { cmd.Wait(); close(p.waitDone) }()
	return p, ExecResult{}, nil
}

// read collects one stream, streaming it to emit once set.
func (p *proc) read(st *procStream) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := st.r.Read(chunk)
		if n > 0 {
			p.emitMu.Lock()
			st.buf.Write(chunk[:n])
			if p.emit == nil {
				st.early = append(st.early, slices.Clone(chunk[:n]))
			} else {
				p.emitChunk(st, chunk[:n])
			}
			p.emitMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// emitChunk streams a chunk within the output limit. Call with emitMu.
func (p *proc) emitChunk(st *procStream, b []byte) {
	if p.req.LongLived {
		p.emit(st.name, b) // a service's output is its protocol: all of it
		return
	}
	if st.streamed >= p.limit {
		return
	}
	k := int64(len(b))
	if st.streamed+k > p.limit {
		k = p.limit - st.streamed
	}
	st.streamed += k
	p.emit(st.name, b[:k])
}

func (p *proc) closeAll() {
	for _, c := range p.closers {
		c.Close()
	}
}

func (p *proc) killGroup() { syscall.Kill(-p.pid, syscall.SIGKILL) }

// finish hands the process req's stdin, waits for it to end (req's timeout
// counts from now), kills what is left of its group and reports how it
// ended.
func (p *proc) finish(ctx context.Context, req ExecRequest, emit func(string, []byte), stdin <-chan []byte, kill <-chan struct{}) (ExecResult, error) {
	defer p.closeAll()
	if req.LongLived {
		req.Timeout = 0
	}
	begin := p.start
	if p.held { // the exec starts now
		begin = time.Now()
	}
	p.emitMu.Lock()
	p.emit = func(string, []byte) {}
	if emit != nil {
		p.emit = emit
	}
	for i := range p.streams {
		st := &p.streams[i]
		for _, b := range st.early {
			p.emitChunk(st, b)
		}
		st.early = nil
	}
	p.emitMu.Unlock()
	if p.stdinW != nil {
		w := p.stdinW
		go func() {
			defer w.Close()
			w.Write(req.Stdin) // EPIPE when the process does not read it all
			if stdin == nil {
				return
			}
			for {
				select {
				case chunk, ok := <-stdin:
					if !ok || chunk == nil {
						return // EOF
					}
					if _, err := w.Write(chunk); err != nil {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var timedOut, killed bool
	var killedAt time.Time
	select {
	case <-p.waitDone:
	case <-timeout:
		timedOut, killedAt = true, time.Now()
		p.killGroup()
		<-p.waitDone
	case <-kill:
		select {
		case <-p.waitDone: // it ended on its own meanwhile
		default:
			killed = true
			p.killGroup()
			<-p.waitDone
		}
	case <-ctx.Done():
		p.killGroup()
		<-p.waitDone
	}
	procs.done(p.pid)
	p.killGroup() // leftovers in the group
	p.drain()

	res := ExecResult{TimedOut: timedOut, Killed: killed, Duration: time.Since(begin), KilledAt: killedAt}
	res.Stdout, res.StdoutTruncated = p.streams[0].buf.Bytes()
	res.Stderr, res.StderrTruncated = p.streams[1].buf.Bytes()
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = signalName(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
	}
	if ctx.Err() != nil && !timedOut {
		return res, ctx.Err()
	}
	return res, nil
}

// drain waits for the output readers, at most pipeDrain once the process
// is gone (a process that escaped with setsid may hold the pipes).
func (p *proc) drain() {
	drained := make(chan struct{})
	go func() { p.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeDrain):
		for i := range p.streams {
			p.streams[i].r.SetReadDeadline(time.Now())
		}
		<-drained
	}
}

// alive reports whether the process has not exited yet.
func (p *proc) alive() bool {
	select {
	case <-p.waitDone:
		return false
	default:
		return true
	}
}

// matches reports whether an exec of req may be served by this held
// process: the same program, arguments, environment, directory and output
// limit, with stdin to give it (the held process waits on its stdin pipe;
// an exec without stdin gets none at all).
func (p *proc) matches(req ExecRequest) bool {
	return !req.LongLived && len(req.Stdin) > 0 &&
		slices.Equal(p.req.Args, req.Args) && slices.Equal(p.req.Env, req.Env) &&
		p.req.Dir == req.Dir && clampLimit(p.req.OutputLimit) == clampLimit(req.OutputLimit)
}

// discard kills a held process and its group and waits for it.
func (p *proc) discard() {
	p.killGroup()
	<-p.waitDone
	procs.done(p.pid)
	p.killGroup()
	p.drain()
	p.closeAll()
}

// prestart starts req's process now and holds it for the exec that
// matches it (runExec); it replaces a process held before. The process
// reads its stdin only once that exec writes it.
func (s *server) prestart(req ExecRequest) error {
	if len(req.Args) == 0 {
		s.dropHeld()
		return nil
	}
	if req.LongLived || len(req.Stdin) > 0 {
		return errors.New("prestart: a held process cannot be long-lived or carry stdin")
	}
	p, res, err := s.startProcHeld(req, true)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("prestart: %s", strings.TrimSpace(string(res.Stderr)))
	}
	s.heldMu.Lock()
	old := s.held
	s.held = p
	closed := s.heldClosed
	if closed {
		s.held = nil
	}
	s.heldMu.Unlock()
	if old != nil {
		old.discard()
	}
	if closed {
		p.discard()
		return errors.New("prestart: agent shutting down")
	}
	return nil
}

func (s *server) takeHeld() *proc {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	p := s.held
	s.held = nil
	return p
}

// dropHeld discards the held process, if any.
func (s *server) dropHeld() {
	if p := s.takeHeld(); p != nil {
		p.discard()
	}
}

func (s *server) execDir(d string) string {
	base := s.rootAbs
	if base == "" {
		base = "/"
	}
	switch {
	case d == "":
		return base
	case filepath.IsAbs(d):
		return filepath.Clean(d)
	}
	return filepath.Join(base, d)
}

// lookPath resolves argv[0] against the PATH of the process's own env.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, nil
	}
	pathEnv := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found: %w", name, os.ErrNotExist)
}

// startFailure reports a process that could not start the way a shell
// does: 127 for not found, 126 for not executable.
func startFailure(err error, start time.Time) ExecResult {
	code := 126
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		code = 127
	}
	return ExecResult{ExitCode: code, Stderr: []byte(err.Error() + "\n"), Duration: time.Since(start)}
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}
