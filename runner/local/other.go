//go:build !linux

package local

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/runner"
)

// Runner is unavailable off Linux.
type Runner struct{}

// New fails off Linux: the local runner needs Linux namespaces and cgroups.
func New(cfg Config) (*Runner, error) {
	return nil, fmt.Errorf("local runner: %w (Linux only)", runner.ErrUnavailable)
}

func (r *Runner) Name() string                      { return "local" }
func (r *Runner) Capabilities() runner.Capabilities { return runner.Capabilities{} }
func (r *Runner) Create(context.Context, runner.SandboxSpec) (runner.Sandbox, error) {
	return nil, fmt.Errorf("local runner: %w (Linux only)", runner.ErrUnavailable)
}
func (r *Runner) Reap(context.Context) (int, error) { return 0, nil }

// ReapReplica implements runner.ReplicaReaper: nothing to reap here.
func (r *Runner) ReapReplica(context.Context, string) (int, error) { return 0, nil }
