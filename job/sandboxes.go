package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Sandboxes outside the job queue, for the daemon's own work on behalf of
// tool sources: a one-off command (deriving a Python function tool's schema
// from its source, never by importing it into sandboxd), and long-lived
// processes (an MCP provider's server). They count against the sandbox cap
// like any other and are isolated by policy.Compile of their effects.

// RunCommand runs cmd to completion in a fresh sandbox with effects (no
// workspace unless they ask for one; then an empty one), and returns the
// tool result of the process (cmd.Decode applied). The error is for
// infrastructure faults only.
func (s *Service) RunCommand(ctx context.Context, cmd tools.Command, effects []tools.Effect, image string) (tools.Result, error) {
	if s.r == nil {
		return tools.Result{}, errors.New("no runner configured")
	}
	id := ids.At("cmd_", time.Now())
	spec, err := s.specFor(id, "", "", effects, func(EgressRecord) {})
	if err != nil {
		return tools.Result{}, err
	}
	limits, err := s.cfg.effectiveLimits(runner.Limits{})
	if err != nil {
		return tools.Result{}, err
	}
	spec.Image, spec.Limits = image, limits
	spec.Labels = map[string]string{"purpose": "command"}
	ws, cleanup, err := s.workspace(id)
	if err != nil {
		return tools.Result{}, err
	}
	defer cleanup()
	spec.Workspace = ws
	if !s.reserveSandbox(true) {
		s.alive.Add(1)
	}
	sb, err := s.create(ctx, spec)
	if err != nil {
		s.alive.Add(-1)
		return tools.Result{}, fmt.Errorf("create sandbox: %w", err)
	}
	s.m.sandboxesAlive.Inc()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := sb.Close(cctx); err != nil {
			s.log.Error("close sandbox", "sandbox", sb.ID(), "err", err)
		}
		s.sandboxClosed()
	}()
	p := runner.Process{Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Timeout: cmd.Timeout}
	if len(cmd.Stdin) > 0 {
		p.Stdin = bytes.NewReader(cmd.Stdin)
	}
	start := time.Now()
	pr, err := sb.Exec(ctx, p)
	if err != nil {
		return tools.Result{}, fmt.Errorf("exec in sandbox: %w", err)
	}
	res := tools.FromProcess(processInfo(pr, limits), effects, time.Since(start))
	if cmd.Decode != nil && !pr.TimedOut {
		res = cmd.Decode(res)
	}
	return res, nil
}

// LaunchSpec describes a long-lived process in its own sandbox.
type LaunchSpec struct {
	// Name identifies the process in logs, sandbox labels and the
	// workspace directory (WorkDir/launch/<name>, when Workspace is "").
	Name string
	Args []string
	Env  []string
	Dir  string
	// Effects decide the sandbox's isolation (policy.Compile), as for a
	// tool: http gives it egress under EgressScope's allowlist.
	Effects []tools.Effect
	Image   string
	// Workspace is a host directory shown at /workspace (read-only or
	// read-write per Effects); "" gives it its own, kept across restarts.
	Workspace string
	// EgressScope is the "tenant" the egress provider is asked for, whose
	// allowlist the process's connections pass (Config.Egress.For).
	EgressScope string
	// Stderr receives the process's stderr (nil: discarded).
	Stderr io.Writer
}

// LongProcess is a running launched process. Stdin and Stdout carry its
// stdio as a stream; Done is closed when it ended (Err says how).
type LongProcess struct {
	Stdin  io.WriteCloser
	Stdout io.ReadCloser

	sb     runner.Sandbox
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	s      *Service
}

// Done is closed once the process has ended and its sandbox is gone.
func (p *LongProcess) Done() <-chan struct{} { return p.done }

// Err is why the process ended (nil while it runs or after a clean exit).
func (p *LongProcess) Err() error {
	<-p.done
	return p.err
}

// SandboxID is the ID of the process's sandbox.
func (p *LongProcess) SandboxID() string { return p.sb.ID() }

// Stop kills the process and destroys its sandbox; it returns when both
// are gone. Idempotent.
func (p *LongProcess) Stop() {
	p.cancel()
	<-p.done
}

// Launch starts spec's process in a new sandbox and returns at once; the
// process runs without a wall-clock limit (runner.Process.LongLived) until
// it exits, Stop is called or ctx ends.
func (s *Service) Launch(ctx context.Context, spec LaunchSpec) (*LongProcess, error) {
	if s.r == nil {
		return nil, errors.New("no runner configured")
	}
	if len(spec.Args) == 0 {
		return nil, fmt.Errorf("%w: launch %s: no command", ErrInvalid, spec.Name)
	}
	id := ids.At("lp_", time.Now())
	ss, err := s.specFor(id, spec.EgressScope, "", spec.Effects, func(r EgressRecord) {
		s.log.Debug("launched process egress", "name", spec.Name, "host", r.Host, "allowed", r.Allowed, "reason", r.Reason)
	})
	if err != nil {
		return nil, err
	}
	limits, err := s.cfg.effectiveLimits(runner.Limits{})
	if err != nil {
		return nil, err
	}
	ss.Image, ss.Limits = spec.Image, limits
	ss.Labels = map[string]string{"launch": spec.Name}
	ss.Workspace = spec.Workspace
	if ss.Workspace == "" {
		ss.Workspace = filepath.Join(s.cfg.WorkDir, "launch", spec.Name)
		if err := os.MkdirAll(ss.Workspace, 0o755); err != nil {
			return nil, fmt.Errorf("launch %s: workspace: %w", spec.Name, err)
		}
		if s.cfg.FileUID >= 0 && os.Geteuid() == 0 {
			_ = os.Chown(ss.Workspace, s.cfg.FileUID, s.cfg.FileGID)
		}
	}
	if !s.reserveSandbox(true) {
		return nil, fmt.Errorf("%w: launch %s: %d sandboxes are alive (pool.max_sandboxes)", ErrSessionLimit, spec.Name, s.cfg.Pool.MaxSandboxes)
	}
	sb, err := s.create(ctx, ss)
	if err != nil {
		s.alive.Add(-1)
		return nil, fmt.Errorf("launch %s: create sandbox: %w", spec.Name, err)
	}
	s.m.sandboxesAlive.Inc()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &LongProcess{Stdin: inW, Stdout: outR, sb: sb, cancel: cancel, done: make(chan struct{}), s: s}
	stderr := spec.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	log := s.log.With("launch", spec.Name, "sandbox", sb.ID())
	go func() {
		defer close(p.done)
		env := spec.Env
		if slices.Contains(spec.Effects, tools.EffectHTTP) { // its only way out: the egress proxy
			env = append(slices.Clip(env), proxyEnv...)
		}
		res, err := sb.Exec(ectx, runner.Process{Args: spec.Args, Env: env, Dir: spec.Dir,
			Stdin: inR, Stdout: outW, Stderr: stderr, LongLived: true})
		switch {
		case ectx.Err() != nil:
			p.err = errors.New("stopped")
		case err != nil:
			p.err = err
		case res.OOMKilled:
			p.err = errors.New("killed: out of memory")
		case res.ForkLoop:
			p.err = errors.New("killed: kept forking at its process limit: a fork loop")
		case res.Signal != "":
			p.err = fmt.Errorf("killed by signal %s", res.Signal)
		default:
			p.err = fmt.Errorf("exited with code %d", res.ExitCode)
		}
		outW.CloseWithError(io.EOF)
		inR.CloseWithError(io.ErrClosedPipe)
		cctx, ccancel := context.WithTimeout(context.Background(), closeTimeout)
		defer ccancel()
		if err := sb.Close(cctx); err != nil {
			log.Error("close sandbox", "err", err)
		}
		s.sandboxClosed()
		cancel()
		log.Info("launched process ended", "err", p.err)
	}()
	log.Info("launched process", "args", spec.Args, "effects", spec.Effects)
	return p, nil
}

// slogWriter writes each chunk to a logger (a launched process's stderr).
type slogWriter struct {
	log *slog.Logger
	msg string
}

// LogWriter returns a writer that logs each chunk written to it at debug
// level under msg (for LaunchSpec.Stderr).
func LogWriter(log *slog.Logger, msg string) io.Writer { return &slogWriter{log: log, msg: msg} }

func (w *slogWriter) Write(p []byte) (int, error) {
	w.log.Debug(w.msg, "output", string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
