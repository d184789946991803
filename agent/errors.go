package agent

import "errors"

var (
	// ErrClosed is returned by Client methods once the connection is gone
	// (closed by Close, the peer went away, or the peer sent garbage).
	ErrClosed = errors.New("agent: connection closed")
	// ErrProtocol marks a peer that broke the protocol; the connection is closed.
	ErrProtocol = errors.New("agent: protocol violation")
	// ErrNoResponse is returned when the agent does not answer an exec or
	// repl within its timeout plus a grace period.
	ErrNoResponse = errors.New("agent: no response within timeout")
)

// RemoteError is a request the agent refused or failed (bad path, file
// missing, unknown message type, ...). The connection stays usable.
type RemoteError struct {
	Op  string // request type, e.g. "read_file"
	Msg string
}

func (e *RemoteError) Error() string { return "agent: " + e.Op + ": " + e.Msg }
