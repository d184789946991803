package runner

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsupported: the spec needs isolation this runner cannot provide
	// here. The runner refused rather than weaken it.
	ErrUnsupported = errors.New("isolation not supported by runner")
	// ErrClosed: the sandbox was closed.
	ErrClosed = errors.New("sandbox closed")
	// ErrInvalidSpec: the spec or process is malformed.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrUnavailable: the backend (daemon, kernel feature) is unavailable,
	// or a sandbox stopped answering (its agent died): an infrastructure
	// fault, which the job service may retry where that is safe.
	ErrUnavailable = errors.New("runner unavailable")
	// ErrDaemonDown: the backend's daemon (dockerd, containerd) is not
	// reachable or does not answer in time; wraps ErrUnavailable. This,
	// not a single sandbox's death, is what the API answers 503 for.
	ErrDaemonDown = fmt.Errorf("daemon down: %w", ErrUnavailable)
)
