package job

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/sandboxd/sandboxd/runner"
)

// Every error the job service defines. The exported ones are what callers
// test with errors.Is; the API maps each to an HTTP status in its one
// switch (api/errors.go). Messages wrap them with the detail
// (fmt.Errorf("%w: ...", ErrInvalid)).
var (
	// ErrNotFound: no such job (or approval) of this tenant.
	ErrNotFound = errors.New("job not found")
	// ErrQueueFull: the bounded queue has no room (429 with Retry-After).
	ErrQueueFull = errors.New("job queue full")
	// ErrInvalid: the request is wrong; the wrapping message says why.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the request conflicts with the current state (an
	// approval already decided).
	ErrConflict = errors.New("conflict")
	// ErrShutdown: the service is shutting down.
	ErrShutdown = errors.New("service shutting down")

	// ErrSessionNotFound is ErrNotFound for sessions (errors.Is matches both).
	ErrSessionNotFound error = notFoundError("session not found")
	// ErrFileNotFound is ErrNotFound for workspace files.
	ErrFileNotFound error = notFoundError("no such file or directory")
	// ErrEffectNotAllowed: the tool needs an effect the session lacks.
	ErrEffectNotAllowed = errors.New("effect not allowed")
	// ErrSessionLimit: the tenant has too many active sessions, or the
	// daemon is at its sandbox cap.
	ErrSessionLimit = errors.New("session limit reached")
	// ErrSessionClosed: the session is no longer active.
	ErrSessionClosed = errors.New("session closed")
	// ErrUnsupported: the runner cannot provide the isolation asked for
	// (wraps runner.ErrUnsupported's message).
	ErrUnsupported = errors.New("not supported")
	// ErrTooLarge: an upload exceeds the configured size.
	ErrTooLarge = errors.New("too large")
	// ErrUnavailable: the runner's daemon (dockerd, containerd) cannot be
	// reached; the wrapping message names it (503 with Retry-After; a job
	// failing for it has reason unavailable).
	ErrUnavailable = errors.New("the sandbox runner is unavailable")
	// ErrHostDiskFull: the host's disk under the data dir is full (not a
	// session's own disk limit, ErrNoSpace): 503 with Retry-After; a job
	// failing for it has reason disk_full.
	ErrHostDiskFull = errors.New("no space left on the host's disk")
	// ErrIdempotencyKeyReused: an Idempotency-Key the tenant used for a
	// different request (tool, arguments, session or limits); 422.
	ErrIdempotencyKeyReused = errors.New("Idempotency-Key reused")
	// ErrStoreUnavailable: the store cannot take the write or read now
	// (the database is unreachable, shutting down or full); nothing was
	// written. 503 with Retry-After: new work waits until it is back.
	ErrStoreUnavailable = errors.New("store unavailable")
)

// infraCause wraps an infrastructure error with the sentinel of its cause
// (ErrUnavailable, ErrHostDiskFull) when it has one, else returns it.
func infraCause(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrUnavailable), errors.Is(err, ErrHostDiskFull):
		return err
	case errors.Is(err, runner.ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", ErrHostDiskFull, err)
	}
	return err
}

// infraReason is the reason of a job that failed for err: unavailable,
// disk_full, else internal.
func infraReason(err error) string {
	switch err = infraCause(err); {
	case errors.Is(err, ErrUnavailable):
		return ReasonUnavailable
	case errors.Is(err, ErrHostDiskFull):
		return ReasonDiskFull
	}
	return ReasonInternal
}

// notFoundError is a kind of ErrNotFound with its own words: errors.Is
// matches it and ErrNotFound, and its message does not say "job not
// found" about a session or a file.
type notFoundError string

func (e notFoundError) Error() string        { return string(e) }
func (e notFoundError) Is(target error) bool { return target == ErrNotFound }

// Errors that stay inside the package.
var (
	// errNoEgress: a tool needs the http effect but the service has no
	// egress proxy (Config.Egress).
	errNoEgress = errors.New("the tool needs the http effect but no egress proxy is configured")
	// errTurnTimeout: a session's job waited its whole timeout for the
	// session's earlier jobs.
	errTurnTimeout = errors.New("timed out waiting for the session's earlier jobs")
)
