package runner

import "errors"

var (
	// ErrUnsupported: the spec needs isolation this runner cannot provide
	// here. The runner refused rather than weaken it.
	ErrUnsupported = errors.New("isolation not supported by runner")
	// ErrClosed: the sandbox was closed.
	ErrClosed = errors.New("sandbox closed")
	// ErrInvalidSpec: the spec or process is malformed.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrUnavailable: the backend (daemon, kernel feature) is unavailable.
	ErrUnavailable = errors.New("runner unavailable")
)
