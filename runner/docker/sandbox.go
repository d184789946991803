package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Sandbox                     = (*Sandbox)(nil)
	_ runner.Prestarter                  = (*Sandbox)(nil)
	_ interface{ Agent() *agent.Client } = (*Sandbox)(nil) // runner.AgentSandbox
)

// Sandbox is one container with the agent as its pid 1.
type Sandbox struct {
	r           *Runner
	id          string
	spec        runner.SandboxSpec
	limits      runner.Limits
	stateDir    string
	containerID string
	labels      map[string]string // set when the workspace was chowned
	cg          *hostside.Cgroup  // nil when the container's cgroup is not readable here

	egressMu sync.Mutex
	egressLn net.Listener // NetworkEgress: the served egress socket (egress.go)

	mu       sync.Mutex
	client   *agent.Client // replaced when a gVisor sandbox is revived
	reviving chan struct{} // non-nil while revive runs; closed when it ends
	sweeping chan struct{} // non-nil while sweep runs (gVisor); closed when it ends
	inflight int           // running Execs
	closed   bool
	done     chan struct{} // closed when Close has finished
}

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.id }

// ContainerID is the Docker container's full ID.
func (s *Sandbox) ContainerID() string { return s.containerID }

// Agent returns the connection to the sandbox agent, for REPL and file
// operations. It is closed by Close. A gVisor sandbox whose memory limit
// was hit is restarted with a new agent (see revive): call Agent again
// rather than keeping the client across calls.
func (s *Sandbox) Agent() *agent.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Exec implements runner.Sandbox: the agent runs the process.
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if err := hostside.CanExec(ctx, s.id, s.isClosed()); err != nil {
		return runner.Result{}, err
	}
	req, onOutput, err := hostside.ExecRequest(p, s.limits, s.spec.Isolation.Workspace)
	if err != nil {
		return runner.Result{}, err
	}

	cl, err := s.beginExec(ctx)
	if err != nil {
		return runner.Result{}, err
	}
	w := s.cg.Watch(&req)
	ar, err := cl.Exec(ctx, req, onOutput)
	w.End()
	s.endExec()
	if err != nil {
		if err, ok := hostside.ExecError(ctx, s.id, s.isClosed, err); ok {
			return runner.Result{}, err
		}
		state, note := s.deathNote(ctx, err)
		if state != nil && state.OOMKilled && !state.Running {
			// The OOM killer took the agent itself: the process's fate is
			// a result; the sandbox is dead (later Execs fail), except
			// under gVisor, where this is how every OOM ends: the sandbox
			// is restarted.
			if s.r.gvisor {
				s.startRevive()
			}
			return hostside.OOMResult(w.After.Peak), nil
		}
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w%s", s.id, runner.ErrUnavailable, err, note)
	}
	return hostside.ExecResult(ar, req, s.limits, w), nil
}

// Prestart implements runner.Prestarter.
func (s *Sandbox) Prestart(ctx context.Context, p runner.Process) error {
	return hostside.Prestart(ctx, s.id, s.isClosed(), s.Agent(), p, s.limits, s.spec.Isolation.Workspace)
}

// killOnProtocolError kills the container when its agent broke the
// protocol (garbage frames, oversized frames): a sandbox that speaks garbage
// is not trusted with another request. The daemon only loses the
// connection; the sandbox's owner still calls Close.
func (s *Sandbox) killOnProtocolError() {
	cl := s.Agent()
	<-cl.Done()
	if !errors.Is(cl.Err(), agent.ErrProtocol) || s.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostside.APITimeout)
	defer cancel()
	s.r.cfg.Logger.Warn("docker runner: agent broke the protocol; killing its sandbox", "sandbox", s.id, "err", cl.Err())
	if _, err := s.r.api.ContainerKill(ctx, s.containerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		s.r.cfg.Logger.Warn("docker runner: kill sandbox", "sandbox", s.id, "err", err)
	}
}

// endExec kills processes that escaped the agent's session once no Exec
// runs: nothing an Exec started outlives it, daemons included.
func (s *Sandbox) endExec() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && !s.closed && s.r.gvisor {
		s.startSweepLocked()
	}
	if s.inflight == 0 && !s.closed && !s.r.gvisor {
		if n := s.cg.KillStrays(); n > 0 {
			s.r.cfg.Logger.Debug("docker runner: killed processes that left the agent's session", "sandbox", s.id, "count", n)
		}
	}
}

// deathNote explains a lost agent connection (cause) from the container's
// state. The connection can drop before the daemon has seen the container
// exit (gVisor: the Sentry dies first), so a container still running is
// polled for a moment unless the agent broke the protocol.
func (s *Sandbox) deathNote(ctx context.Context, cause error) (*container.State, string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	settle := time.Now().Add(2 * time.Second)
	if errors.Is(cause, agent.ErrProtocol) {
		settle = time.Time{}
	}
	insp, err := s.r.inspect(cctx, s.containerID)
	for err == nil && insp.State != nil && insp.State.Running && time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
		insp, err = s.r.inspect(cctx, s.containerID)
	}
	if err != nil {
		return nil, " (" + s.r.wrap("inspect container", err).Error() + ")"
	}
	if insp.State == nil {
		return nil, ""
	}
	return insp.State, fmt.Sprintf(" (container %s, exit %d, oom killed %v)", insp.State.Status, insp.State.ExitCode, insp.State.OOMKilled)
}

// Stats implements runner.Sandbox from a one-shot Docker stats sample.
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	if s.isClosed() {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: %w", s.id, runner.ErrClosed)
	}
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	rd, err := s.r.api.ContainerStats(cctx, s.containerID, client.ContainerStatsOptions{}) // one sample: one-shot
	if err != nil {
		return runner.Usage{}, hostside.CtxOr(ctx, s.r.wrap("container stats", err))
	}
	defer rd.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(rd.Body, 1<<20)).Decode(&st); err != nil {
		return runner.Usage{}, fmt.Errorf("docker: decode stats: %w", err)
	}
	u := runner.Usage{CPU: time.Duration(st.CPUStats.CPUUsage.TotalUsage), PeakMemory: int64(st.MemoryStats.MaxUsage)}
	if u.PeakMemory == 0 {
		u.PeakMemory = int64(st.MemoryStats.Usage)
	}
	if s.cg != nil { // cgroup v2 stats carry no peak
		if smp := s.cg.Sample(); smp.Peak > u.PeakMemory {
			u.PeakMemory = smp.Peak
		}
	}
	return u, nil
}

// Close implements runner.Sandbox: it closes the agent connection (the
// agent kills what it runs), removes the container and the state dir.
// Idempotent; later calls wait for the first and return nil. Cleanup runs
// even if ctx is cancelled, bounded by its own timeout.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.r.host.CloseSandbox(ctx, s.id, s.markClosed, s.destroy)
}

// markClosed is hostside.Instance.CloseSandbox's mark.
func (s *Sandbox) markClosed() (chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.done, true
	}
	s.closed, s.done = true, make(chan struct{})
	return s.done, false
}

// destroy removes everything the sandbox has on the host.
func (s *Sandbox) destroy(ctx context.Context) error {
	var errs []error
	s.closeEgress()
	if cl := s.Agent(); cl != nil {
		cl.Close()
	}
	if s.containerID != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
		_, err := s.r.api.ContainerRemove(cctx, s.containerID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err != nil && !hostside.Gone(err) {
			errs = append(errs, s.r.wrap("remove container "+s.containerID, err))
		}
	}
	if s.r.tenants != nil && s.spec.Tenant != "" {
		s.r.tenants.ReleaseCPU(s.spec.Tenant, s.id)
	}
	if err := hostside.RestoreWorkspace(s.labels); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.stateDir); err != nil {
		errs = append(errs, fmt.Errorf("docker: remove state dir: %w", err))
	}
	return errors.Join(errs...)
}
