package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Sandbox      = (*Sandbox)(nil)
	_ runner.AgentSandbox = (*Sandbox)(nil)
	_ runner.Prestarter   = (*Sandbox)(nil)
)

// Sandbox is a local sandbox: its namespaces with the agent as pid 1, its
// cgroup and its state dir.
type Sandbox struct {
	r        *Runner
	spec     runner.SandboxSpec
	limits   runner.Limits
	stateDir string
	owner    owner
	cg       *cgroup          // nil without cgroups (AllowWeak)
	hcg      *hostside.Cgroup // the same group read per Exec; nil without cgroups
	egress   net.Listener     // NetworkEgress: the egress socket, served by spec.Egress
	l        *launcher        // the agent's process
	log      *agentLog
	client   *agent.Client

	mu       sync.Mutex
	inflight int
	closed   bool
	done     chan struct{} // closed when Close has finished
}

// runDir is the host directory mounted at runner.AgentDir.
func (s *Sandbox) runDir() string { return filepath.Join(s.stateDir, "run") }

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.spec.ID }

// Agent implements runner.AgentSandbox: the connection to the sandbox's
// agent (REPL, files). Close closes it.
func (s *Sandbox) Agent() *agent.Client { return s.client }

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Prestart implements runner.Prestarter.
func (s *Sandbox) Prestart(ctx context.Context, p runner.Process) error {
	return hostside.Prestart(ctx, s.spec.ID, s.isClosed(), s.client, p, s.limits, s.spec.Isolation.Workspace)
}

// Exec implements runner.Sandbox: the agent runs the process as the code
// (hostside.ExecRequest, ExecResult: the container runners' way).
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	req, onOutput, err := hostside.ExecRequest(p, s.limits, s.spec.Isolation.Workspace)
	if err != nil {
		return runner.Result{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.spec.ID, runner.ErrClosed)
	}
	s.inflight++
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.endExec()
		return runner.Result{}, err
	}
	w := s.hcg.Watch(&req)
	ar, err := s.client.Exec(ctx, req, onOutput)
	w.End()
	s.endExec()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return runner.Result{}, ctx.Err()
		case s.isClosed():
			return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.spec.ID, runner.ErrClosed)
		}
		var re *agent.RemoteError
		if errors.As(err, &re) {
			return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w", s.spec.ID, runner.ErrInvalidSpec, err)
		}
		if s.agentExited(2*time.Second) && s.hcg.Sample().OOMKills > w.Before.OOMKills {
			// The OOM killer took the agent itself: the process's fate is
			// a result; later Execs fail.
			return hostside.OOMResult(w.After.Peak), nil
		}
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w%s", s.spec.ID, runner.ErrUnavailable, err, s.log.note())
	}
	return hostside.ExecResult(ar, req, s.limits, w), nil
}

// endExec kills processes that left the agent's session once no Exec
// runs: nothing an Exec started outlives it, daemons included.
func (s *Sandbox) endExec() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && !s.closed {
		if n := s.hcg.KillStrays(); n > 0 {
			s.r.cfg.Logger.Debug("local runner: killed processes that left the agent's session", "sandbox", s.spec.ID, "count", n)
		}
	}
}

// agentExited reports whether the agent died, waiting up to d.
func (s *Sandbox) agentExited(d time.Duration) bool {
	select {
	case <-s.l.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Stats implements runner.Sandbox from the sandbox's cgroup.
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	if s.isClosed() {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: %w", s.spec.ID, runner.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return runner.Usage{}, err
	}
	if s.hcg == nil {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: no cgroups: %w", s.spec.ID, runner.ErrUnsupported)
	}
	smp := s.hcg.Sample()
	return runner.Usage{CPU: smp.CPU, PeakMemory: smp.Peak}, nil
}

// Close implements runner.Sandbox: it closes the agent connection, kills
// the agent (the sandbox's init: every process of the sandbox dies with
// it), removes the cgroup and the state dir and gives the workspace its
// owner back. The workspace's content is left alone. Idempotent; later
// calls wait for the first and return nil.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		done := s.done
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	s.closed = true
	s.done = make(chan struct{})
	s.mu.Unlock()
	defer close(s.done)

	if s.client != nil {
		s.client.Close()
	}
	if s.l != nil {
		s.l.kill()
	}
	if s.egress != nil {
		s.egress.Close()
	}
	var errs []error
	if s.cg != nil {
		if err := s.cg.destroy(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
		if s.spec.Tenant != "" {
			s.r.tenants.ReleaseCPU(s.spec.Tenant, s.spec.ID)
		}
	}
	if err := s.r.destroy(s.stateDir, s.owner); err != nil {
		errs = append(errs, err)
	}
	s.r.mu.Lock()
	if s.r.live[s.spec.ID] == s {
		delete(s.r.live, s.spec.ID)
	}
	s.r.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sandbox %s: %w", s.spec.ID, err)
	}
	return nil
}

// Leftovers lists what a sandbox with this ID still holds on the host:
// cgroup directories, processes in them and its state dir. Empty after a
// successful Close. For tests and diagnostics.
func (r *Runner) Leftovers(id string) []string {
	var out []string
	if r.cg != nil {
		rels := []string{filepath.Join(r.cfg.CgroupParent, id)}
		for _, d := range r.cg.group(r.cfg.CgroupParent).dirs() { // under a tenant's group
			m, _ := filepath.Glob(filepath.Join(d, "tenant-*", id))
			for _, p := range m {
				if rel := filepath.Join(r.cfg.CgroupParent, filepath.Base(filepath.Dir(p)), id); !slices.Contains(rels, rel) {
					rels = append(rels, rel)
				}
			}
		}
		for _, rel := range rels {
			g := r.cg.group(rel)
			for _, pid := range g.procs() {
				out = append(out, fmt.Sprintf("process %d in cgroup", pid))
			}
			for _, d := range g.exists() {
				out = append(out, "cgroup "+d)
			}
		}
	}
	if d := filepath.Join(r.cfg.StateDir, id); pathExists(d) {
		out = append(out, "state dir "+d)
	}
	return out
}
