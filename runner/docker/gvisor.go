package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// gVisor (runsc) as the container runtime, registered with dockerd by
// scripts/gvisor-setup.sh. What differs from runc, and what the runner does
// about it:
//
//   - The agent's socket is created inside the sandbox: runsc must run with
//     --host-uds=all (create for the agent, open for the egress socket) or
//     the host never sees it and Create times out waiting for the agent.
//   - gVisor ignores the OCI seccomp profile unless runsc runs with
//     --oci-seccomp; with it the Sentry applies the profile to the
//     sandbox's tasks (Seccomp: 2 in /proc/self/status). It returns EPERM
//     for every SCMP_ACT_ERRNO rule whatever its errnoRet, so the
//     container gets the isolation's SeccompGVisor (clone3 allowed: glibc
//     falls back from clone3 to clone only on ENOSYS) instead of Seccomp.
//   - Sandbox processes are Sentry tasks, not host processes. The host pids
//     in the container's cgroup are runsc's own (sandbox, gofer, one
//     systrap stub per address space), so the host-side stray killing
//     (cgroup.killStrays) is off: it would kill the gofer. Instead, once
//     no Exec runs, a shell script run through the agent kills what left
//     the agent's session (startSweepLocked); the next Exec waits for it.
//   - The host pids cgroup counts those runsc tasks (about 25 plus 2 per
//     sandbox task), so Limits.PIDs is enforced inside instead, as
//     RLIMIT_NPROC (hostside.GVisorNProc): gVisor counts it per uid in its
//     own kernel, and every process of the code runs as sandboxUID, so it
//     bounds them like a pids cgroup (the agent, uid 0, keeps one pid).
//     The host limit keeps a ceiling for runsc's own tasks (gvisorHostPIDs).
//   - gVisor has no memory limit of its own: the host cgroup limit covers
//     the whole sandbox, and an allocation past it makes the host OOM killer
//     take the Sentry with every process inside. The Exec reports
//     OOMKilled as under runc, and the runner restarts the container with a
//     fresh agent (revive); the workspace survives, /tmp, the REPL's state
//     and background processes do not.

// isGVisor reports whether the daemon's runtime (name, binary path) is runsc.
func isGVisor(name, path string) bool {
	if path != "" {
		return strings.HasPrefix(filepath.Base(path), "runsc")
	}
	return strings.HasPrefix(name, "runsc")
}

// gvisorHostPIDs is the host pids limit of a gVisor sandbox allowed pids
// tasks: runsc's baseline (~25 measured) plus a systrap stub task per
// sandbox task, with room for the Sentry's own threads.
func gvisorHostPIDs(pids int64) int64 { return 2*pids + 128 }

// applyGVisor adapts the container's limits to gVisor (see above).
func (r *Runner) applyGVisor(hc *container.HostConfig, l runner.Limits) {
	if !r.gvisor {
		return
	}
	host := gvisorHostPIDs(l.PIDs)
	hc.Resources.PidsLimit = &host
	nproc := hostside.GVisorNProc(l.PIDs)
	hc.Resources.Ulimits = append(hc.Resources.Ulimits, &container.Ulimit{Name: "nproc", Soft: nproc, Hard: nproc})
}

// beginExec waits for a revive or a sweep in progress, then counts an
// Exec in flight (endExec ends it) and returns the agent client.
func (s *Sandbox) beginExec(ctx context.Context) (*agent.Client, error) {
	for {
		s.mu.Lock()
		ch := s.reviving
		if ch == nil {
			ch = s.sweeping
		}
		if ch == nil {
			s.inflight++
			cl := s.client
			s.mu.Unlock()
			return cl, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sweepScript kills every process of the sandbox outside the agent's
// session: what an Exec left behind with setsid (the agent kills each
// Exec's process group, which such daemons escaped). The agent, the REPL
// and the script itself are in the agent's session. /proc/<pid>/stat is
// "pid (comm) state ppid pgrp session ..."; comm may hold ") ", the last
// one ends it. read and kill are dash builtins: no process but the shell.
const sweepScript = `read -r a </proc/1/stat || exit 1
set -- ${a##*) }
keep=$4
for d in /proc/[0-9]*; do
	read -r l <"$d/stat" 2>/dev/null || continue
	set -- ${l##*) }
	[ "$4" = "$keep" ] || kill -9 "${d#/proc/}" 2>/dev/null
done
exit 0`

// sweepTimeout bounds one sweep.
const sweepTimeout = 10 * time.Second

// startSweepLocked starts, in the background, the gVisor counterpart of
// cgroup.killStrays (whose host view shows runsc's processes, not the
// sandbox's): an Exec of sweepScript through the agent. The next Exec
// waits for it (beginExec), so nothing an Exec started outlives it into
// the next one. Call with s.mu held, once no Exec runs.
func (s *Sandbox) startSweepLocked() {
	if s.sweeping != nil || s.reviving != nil || s.client == nil {
		return
	}
	ch, cl := make(chan struct{}), s.client
	s.sweeping = ch
	go func() {
		defer func() {
			s.mu.Lock()
			s.sweeping = nil
			s.mu.Unlock()
			close(ch)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout+time.Second)
		defer cancel()
		res, err := cl.Exec(ctx, agent.ExecRequest{Args: []string{"/bin/sh", "-c", sweepScript}, Env: []string{}, Dir: "/", Timeout: sweepTimeout, OutputLimit: 4096}, nil)
		if err != nil || res.ExitCode != 0 {
			s.r.cfg.Logger.Debug("docker runner: gVisor stray sweep failed", "sandbox", s.id, "err", err, "exit", res.ExitCode, "stderr", string(res.Stderr))
		}
	}()
}

// startRevive restarts, in the background, a gVisor sandbox that the host
// OOM killer ended; Execs wait for it (beginExec). No-op while one runs or
// once the sandbox is closed.
func (s *Sandbox) startRevive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.reviving != nil {
		return
	}
	ch := make(chan struct{})
	s.reviving = ch
	go func() {
		if err := s.revive(); err != nil {
			s.r.cfg.Logger.Warn("docker runner: restart gVisor sandbox after OOM", "sandbox", s.id, "err", err)
		}
		s.mu.Lock()
		s.reviving = nil
		s.mu.Unlock()
		close(ch)
	}()
}

// revive starts the stopped container again and dials its new agent. The
// socket directory is emptied first, while nothing of the sandbox runs:
// code inside may have left a symlink where the agent's socket goes, and
// the runner dials that path again here.
func (s *Sandbox) revive() error {
	ctx, cancel := context.WithTimeout(context.Background(), hostside.CreateTimeout)
	defer cancel()
	insp, err := s.r.inspect(ctx, s.containerID)
	if err != nil {
		return s.r.wrap("inspect container", err)
	}
	if insp.State != nil && insp.State.Running {
		return nil // revived already (a concurrent Exec saw the same death)
	}
	if err := emptyDir(s.stateDir); err != nil {
		return fmt.Errorf("docker: clear state dir: %w", err)
	}
	if s.spec.Isolation.Network == runner.NetworkEgress {
		if err := s.startEgress(); err != nil {
			return fmt.Errorf("docker: %w", err)
		}
	}
	if _, err := s.r.api.ContainerStart(ctx, s.containerID, client.ContainerStartOptions{}); err != nil {
		return s.r.wrap("start container", err)
	}
	cl, err := s.r.dialAgent(ctx, s)
	if err != nil {
		return fmt.Errorf("docker: agent after restart: %w\n%s", err, s.r.logsTail(ctx, s.containerID))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cl.Close()
		return nil
	}
	old := s.client
	s.client = cl
	s.mu.Unlock()
	old.Close()
	go s.killOnProtocolError()
	s.r.cfg.Logger.Info("docker runner: restarted gVisor sandbox after OOM", "sandbox", s.id)
	return nil
}

// emptyDir removes the entries of dir (symlinks themselves, never their
// targets).
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
