package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
// out or ctx ends, the whole group is killed with SIGKILL: background
// leftovers do not outlive the exec (use setsid to detach on purpose).
func (s *server) runExec(ctx context.Context, req ExecRequest, emit func(string, []byte), stdin <-chan []byte) (ExecResult, error) {
	start := time.Now()
	env := make([]string, 0, len(s.opts.Env)+len(req.Env))
	env = append(append(env, s.opts.Env...), req.Env...)
	dir := s.execDir(req.Dir)
	path, err := lookPath(req.Args[0], env, dir)
	if err != nil {
		return startFailure(err, start), nil
	}
	cmd := &exec.Cmd{Path: path, Args: req.Args, Env: env, Dir: dir,
		SysProcAttr: s.opts.CodeUser.sysProcAttr()}

	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var stdinW *os.File
	if req.LongLived {
		req.Timeout = 0
	}
	if len(req.Stdin) > 0 || req.LongLived {
		r, w, err := os.Pipe()
		if err != nil {
			return ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		cmd.Stdin, stdinW = r, w
		closers = append(closers, r, w)
	}
	limit := clampLimit(req.OutputLimit)
	streams := [2]struct {
		name string
		r, w *os.File
		buf  *capBuf
	}{{name: "stdout"}, {name: "stderr"}}
	for i := range streams {
		r, w, err := os.Pipe()
		if err != nil {
			return ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		streams[i].r, streams[i].w, streams[i].buf = r, w, newCapBuf(limit)
		closers = append(closers, r, w)
	}
	cmd.Stdout, cmd.Stderr = streams[0].w, streams[1].w

	if err := procs.start(cmd); err != nil {
		return startFailure(err, start), nil
	}
	pid := cmd.Process.Pid
	// Only the child keeps the write ends now.
	streams[0].w.Close()
	streams[1].w.Close()
	if stdinW != nil {
		cmd.Stdin.(*os.File).Close()
		go func() {
			defer stdinW.Close()
			stdinW.Write(req.Stdin) // EPIPE when the process does not read it all
			if stdin == nil {
				return
			}
			for {
				select {
				case chunk, ok := <-stdin:
					if !ok || chunk == nil {
						return // EOF
					}
					if _, err := stdinW.Write(chunk); err != nil {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	// Emit serialises streamed chunks of both streams (one writer).
	var emitMu sync.Mutex
	var readers sync.WaitGroup
	for i := range streams {
		st := &streams[i]
		readers.Go(func() {
			var streamed int64
			chunk := make([]byte, 32<<10)
			for {
				n, err := st.r.Read(chunk)
				if n > 0 {
					emitMu.Lock()
					st.buf.Write(chunk[:n])
					if emit != nil && req.LongLived {
						emit(st.name, chunk[:n]) // a service's output is its protocol: all of it
					} else if emit != nil && streamed < limit {
						k := int64(n)
						if streamed+k > limit {
							k = limit - streamed
						}
						streamed += k
						emit(st.name, chunk[:k])
					}
					emitMu.Unlock()
				}
				if err != nil {
					return
				}
			}
		})
	}

	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	killGroup := func() { syscall.Kill(-pid, syscall.SIGKILL) }
	var timedOut bool
	var killedAt time.Time
	select {
	case <-waitDone:
	case <-timeout:
		timedOut, killedAt = true, time.Now()
		killGroup()
		<-waitDone
	case <-ctx.Done():
		killGroup()
		<-waitDone
	}
	procs.done(pid)
	killGroup() // leftovers in the group
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeDrain):
		for i := range streams {
			streams[i].r.SetReadDeadline(time.Now())
		}
		<-drained
	}

	res := ExecResult{TimedOut: timedOut, Duration: time.Since(start), KilledAt: killedAt}
	res.Stdout, res.StdoutTruncated = streams[0].buf.Bytes()
	res.Stderr, res.StderrTruncated = streams[1].buf.Bytes()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
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
