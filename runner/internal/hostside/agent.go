package hostside

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

// DialAgent connects to the agent listening at sock once it answers a
// ping, before any sandboxed code runs: the socket path is dialled only
// here, never again (code inside could later swap it for a symlink to a
// host socket). It gives up after timeout, or as soon as watch reports the
// sandbox gone: watch runs in its own goroutine until its context ends and
// calls stop with the cause (e.g. "task exited with 1") when the sandbox
// died.
func DialAgent(ctx context.Context, sock string, timeout time.Duration, watch func(ctx context.Context, stop func(error))) (*agent.Client, error) {
	actx, acancel := context.WithTimeoutCause(ctx, timeout, errors.New("agent start timeout"))
	defer acancel()
	watchCtx, stopWatch := context.WithCancelCause(actx)
	defer stopWatch(nil)
	go watch(watchCtx, stopWatch)
	cl, err := agent.Dial(watchCtx, sock)
	if err == nil {
		if err = cl.Ping(watchCtx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		if cause := context.Cause(watchCtx); cause != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: %w", cause, err)
		}
		return nil, err
	}
	return cl, nil
}

// CtxOr prefers the caller's context error over a derived one.
func CtxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
