package local

import (
	"bufio"
	"context"
	"encoding/json"
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

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/local/launch"
)

// agentTimeout bounds a sandbox's start: the launcher's setup and the
// agent's "ready".
const agentTimeout = 10 * time.Second

// cloneFlags are the sandbox's namespaces (no user namespace: the agent
// is uid 0 of the host's, with only its six capabilities).
const cloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// launcher is a started launcher process: after its exec, the sandbox's
// agent (pid 1 of the sandbox, its session leader).
type launcher struct {
	cmd    *exec.Cmd
	cfgW   *os.File      // the Config goes here; closing releases it
	status *os.File      // the launcher's setup error, or EOF at exec
	exited chan struct{} // closed once the process has been waited for
	err    error         // how it ended, valid once exited is closed
}

// startLauncher starts path in the sandbox's namespaces, blocked until
// release sends cfg. stderr, when set, receives the launcher's and then
// the agent's stdout and stderr. It dies with this process (parent-death
// signal) and, as the namespace's init, takes every process of the
// sandbox with it.
func startLauncher(ctx context.Context, path string, cfg launch.Config, stderr *os.File, cg *cgroup) (l *launcher, err error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       path,
		Args:       []string{filepath.Base(path)},
		Env:        []string{"GOMAXPROCS=1"},
		ExtraFiles: []*os.File{cfgR, statusW}, // launch.ConfigFD, launch.StatusFD
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: cloneFlags,
			Setsid:     true, // the agent leads the sandbox's session (hostside.Cgroup.KillStrays)
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if stderr != nil {
		cmd.Stdout, cmd.Stderr = stderr, stderr
	}
	err = cmd.Start()
	cfgR.Close()
	statusW.Close()
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, fmt.Errorf("start launcher: %w", err)
	}
	l = &launcher{cmd: cmd, cfgW: cfgW, status: statusR, exited: make(chan struct{})}
	go func() {
		l.err = cmd.Wait()
		close(l.exited)
	}()
	defer func() {
		if err != nil {
			l.kill()
		}
	}()
	// The launcher blocks on its config: put it into the cgroup first.
	if cg != nil {
		if err := cg.add(cmd.Process.Pid); err != nil {
			return l, err
		}
	}
	err = json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	if err != nil {
		return l, fmt.Errorf("send launcher config: %w", err)
	}
	return l, nil
}

// wait waits for the launcher's setup: nil once the agent was exec'd (or
// a probe succeeded), else the setup error or how the launcher died.
func (l *launcher) wait(ctx context.Context) error {
	done := make(chan struct{})
	var msg []byte
	var rerr error
	go func() {
		msg, rerr = io.ReadAll(io.LimitReader(l.status, 64<<10))
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		l.kill()
		<-done
		return context.Cause(ctx)
	}
	l.status.Close()
	switch {
	case rerr != nil:
		return fmt.Errorf("launcher status: %w", rerr)
	case len(msg) > 0:
		<-l.exited
		return fmt.Errorf("sandbox setup: %s", msg)
	}
	return nil
}

// killWait bounds how long kill waits for the process to be reaped.
const killWait = 10 * time.Second

// kill ends the launcher (or the agent: the sandbox's init, whose death
// takes every process of its pid namespace) and waits for it, at most
// killWait (a process stuck in the kernel must not hang Close; the
// cgroup's removal then reports it).
func (l *launcher) kill() {
	_ = l.cmd.Process.Kill()
	select {
	case <-l.exited:
	case <-time.After(killWait):
	}
}

// start launches the sandbox (its isolation, then the agent as its pid
// 1) and connects to the agent.
func (s *Sandbox) start(ctx context.Context, rootfs string, filter []byte) error {
	ctx, cancel := context.WithTimeoutCause(ctx, agentTimeout, errors.New("sandbox start timeout"))
	defer cancel()
	iso := s.spec.Isolation
	tmpBytes, tmpInodes := s.limits.Tmpfs(s.r.cfg.TmpBytes)
	cfg := launch.Config{
		Root:      filepath.Join(s.stateDir, "root"),
		Rootfs:    rootfs,
		TmpBytes:  tmpBytes,
		TmpInodes: tmpInodes,
		AgentPath: s.r.cfg.AgentPath,
		RunDir:    s.runDir(),
		Args:      hostside.AgentCommand(iso.Network == runner.NetworkEgress),
		NoFile:    uint64(s.limits.NoFile),
		FileSize:  uint64(s.limits.FileSize),
		Masked:    iso.MaskedPaths,
		ReadOnly:  iso.ReadonlyPaths,
		Landlock:  s.r.caps.Landlock,
		KeepCaps:  policy.AgentCapabilityMask(),
		Seccomp:   filter,
	}
	if iso.Workspace != runner.WorkspaceNone {
		cfg.Workspace, cfg.WorkspaceMode = s.spec.Workspace, string(iso.Workspace)
	}
	logR, logW, err := os.Pipe()
	if err != nil {
		return err
	}
	l, err := startLauncher(ctx, s.r.cfg.LauncherPath, cfg, logW, s.cg)
	logW.Close()
	if err != nil {
		logR.Close()
		return err
	}
	s.l, s.log = l, newAgentLog(logR)
	if err := l.wait(ctx); err != nil {
		return fmt.Errorf("%w%s", err, s.log.note())
	}
	if err := s.log.waitReady(ctx, l.exited); err != nil {
		l.kill()
		return fmt.Errorf("agent did not start: %w%s", err, s.log.note())
	}
	if s.cg != nil {
		s.hcg = hostside.FindCgroup(l.cmd.Process.Pid)
	}
	cl, err := hostside.DialAgent(ctx, filepath.Join(s.runDir(), filepath.Base(runner.AgentSocketPath)), agentTimeout, func(ctx context.Context, stop func(error)) {
		select {
		case <-ctx.Done():
		case <-l.exited:
			stop(fmt.Errorf("agent exited: %v", l.err))
		}
	})
	if err != nil {
		return fmt.Errorf("agent did not answer: %w%s", err, s.log.note())
	}
	s.client = cl
	return nil
}

// agentLog reads the agent's stdout and stderr: the agent says "ready"
// there once it listens; the rest (errors only) is kept as a short tail
// for error messages.
type agentLog struct {
	ready chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	tail  []string
}

const agentLogLines = 20

func newAgentLog(r *os.File) *agentLog {
	a := &agentLog{ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 4096), 64<<10)
		readySeen := false
		for sc.Scan() {
			line := sc.Text()
			if !readySeen && line == "ready" {
				readySeen = true
				close(a.ready)
				continue
			}
			a.mu.Lock()
			a.tail = append(a.tail, line)
			if len(a.tail) > agentLogLines {
				a.tail = a.tail[1:]
			}
			a.mu.Unlock()
		}
		// Drain what a scanner error left (an over-long line): the agent
		// must never block on a full pipe.
		_, _ = io.Copy(io.Discard, r)
	}()
	return a
}

// waitReady waits for the agent's "ready" line.
func (a *agentLog) waitReady(ctx context.Context, exited <-chan struct{}) error {
	select {
	case <-a.ready:
		return nil
	case <-exited:
		<-a.done
		return errors.New("it exited")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// note is the log's tail for an error message.
func (a *agentLog) note() string {
	if a == nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.tail) == 0 {
		return ""
	}
	return "; agent output: " + strings.Join(a.tail, "\n")
}
