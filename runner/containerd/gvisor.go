package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// gVisor (runsc) as the runtime: Config.Runtime "runsc" runs the runsc
// wrapper scripts/containerd-setup.sh writes (--platform=systrap: no KVM
// here; --host-uds=all: the agent's socket, created inside, must be
// visible on the host and the egress socket connectable from inside;
// --oci-seccomp: gVisor ignores the OCI seccomp profile otherwise) through
// the runc v2 shim. What differs from runc, as in the Docker runner:
//
//   - Sandbox processes are Sentry tasks, not host processes: the host
//     pids in the task's cgroup are runsc's own, so host-side stray
//     killing is off (it would kill the gofer); the agent still kills
//     each Exec's process group.
//   - The host pids cgroup counts runsc's tasks, so Limits.PIDs is
//     enforced inside as RLIMIT_NPROC (hostside.GVisorNProc: every
//     process of the code runs as sandboxUID), with a host ceiling of
//     gvisorHostPIDs.
//   - The host memory cgroup covers the whole sandbox: an allocation past
//     it kills the Sentry with everything inside. Exec reports that as
//     OOMKilled and the runner restarts the task with a fresh agent
//     (revive); the workspace survives, /tmp, the REPL's state and
//     background processes do not.

// gvisorHostPIDs is the host pids limit of a gVisor sandbox allowed pids
// tasks: runsc's baseline plus a systrap stub per task, with headroom.
func gvisorHostPIDs(pids int64) int64 { return 4*pids + 256 }

// startRevive restarts, in the background, a gVisor sandbox whose life l
// the host OOM killer ended; Execs wait for it. No-op while one runs,
// once the sandbox is closed, or when l is no longer current.
func (s *Sandbox) startRevive(l *life) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.reviving != nil || s.cur != l {
		return
	}
	ch := make(chan struct{})
	s.reviving = ch
	go func() {
		if err := s.revive(l); err != nil {
			s.r.cfg.Logger.Warn("containerd runner: restart gVisor sandbox after OOM", "sandbox", s.id, "err", err)
		}
		s.mu.Lock()
		s.reviving = nil
		s.mu.Unlock()
		close(ch)
	}()
}

// revive deletes the dead task and starts a new one with a fresh agent.
// The run dir is emptied first, while nothing of the sandbox runs: code
// inside may have left a symlink where the agent's socket goes, and the
// runner dials that path again. The workspace survives; /tmp, the REPL's
// state and background processes do not.
func (s *Sandbox) revive(old *life) error {
	ctx, cancel := context.WithTimeout(context.Background(), hostside.CreateTimeout)
	defer cancel()
	if err := old.stop(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	egress := s.egress
	s.egress = nil
	s.mu.Unlock()
	if egress != nil {
		egress.Close()
	}
	if err := emptyDir(s.runDir); err != nil {
		return fmt.Errorf("containerd: clear run dir: %w", err)
	}
	if s.spec.Isolation.Network == runner.NetworkEgress {
		if err := s.listenEgress(); err != nil {
			return fmt.Errorf("containerd: egress: %w", err)
		}
	}
	l, err := s.start(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return l.stop(ctx)
	}
	s.cur = l
	s.mu.Unlock()
	go s.killOnProtocolError(l)
	return nil
}

// emptyDir removes everything inside dir (not following symlinks).
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
