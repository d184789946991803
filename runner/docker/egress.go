package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// NetworkEgress in a container: the network stays "none" (loopback only,
// no route out). The agent listens on runner.EgressProxyAddr on the
// container's loopback and forwards each connection to the unix socket
// <stateDir>/egress.sock (runner.EgressSocketPath inside), which the runner
// listens on and hands to SandboxSpec.Egress. The isolation's seccomp
// profile allows inet sockets so programs can reach the proxy address; with
// no route, nothing else answers.

const egressSocketName = "egress.sock"

// entrypoint is the agent's command line for spec.
func entrypoint(spec runner.SandboxSpec) []string {
	// The agent model's command line: the code as sandboxUID, and with
	// egress the proxy forwarder.
	return hostside.AgentArgs(spec.Isolation.Network == runner.NetworkEgress)
}

// startEgress listens on the sandbox's egress socket and serves it with
// spec.Egress until closeEgress. Called again (after the state dir was
// emptied, e.g. a gVisor revive) it replaces the listener.
func (s *Sandbox) startEgress() error {
	path := filepath.Join(s.stateDir, egressSocketName)
	s.closeEgress()
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("egress socket: %w", err)
	}
	// The state dir is removed whole at destroy; the sandbox may have
	// replaced the path meanwhile, so never unlink by name.
	ln.SetUnlinkOnClose(false)
	// Only the agent (uid 0) connects: the state dir (0700, root's) is
	// closed to the code, which reaches the proxy through the agent.
	s.egressMu.Lock()
	s.egressLn = ln
	s.egressMu.Unlock()
	eg, id, log := s.spec.Egress, s.id, s.r.cfg.Logger
	go func() {
		if err := eg.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Warn("docker runner: egress proxy stopped", "sandbox", id, "err", err)
		}
	}()
	return nil
}

// closeEgress stops serving the egress socket (idempotent).
func (s *Sandbox) closeEgress() {
	s.egressMu.Lock()
	defer s.egressMu.Unlock()
	if s.egressLn != nil {
		s.egressLn.Close()
		s.egressLn = nil
	}
}
