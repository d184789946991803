package hostside

import (
	"errors"
	"log/slog"
	"net"

	"github.com/sandboxd/sandboxd/runner"
)

// ServeEgress listens on the unix socket path, a sandbox's egress socket
// (runner.EgressSocketPath inside: in the state directory only the agent
// reaches, which forwards runner.EgressProxyAddr to it), and serves it
// with eg until the returned listener is closed. The socket is not
// unlinked at close (the sandbox may have replaced the path meanwhile):
// the state directory is removed whole.
func ServeEgress(path string, eg runner.Egress, log *slog.Logger, sandbox string) (net.Listener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	go func() {
		if err := eg.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Warn("egress proxy stopped", "sandbox", sandbox, "err", err)
		}
	}()
	return ln, nil
}
