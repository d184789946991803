package docker

import (
	"github.com/sandboxd/sandboxd/runner/internal/hostside"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// forget drops a sandbox from the set this runner holds.
func (r *Runner) forget(id string) {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
}

func (r *Runner) held(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.live[id]
	return ok
}

// Reap implements runner.Reaper. It removes managed containers that no
// open Sandbox of this runner holds: those of this InstanceID, and those of
// other owners whose process is dead (the owner-proc label; a concurrently
// running sandboxd sharing the daemon keeps its sandboxes). Containers
// without that label fall back to age: those created before this runner
// started are reaped. It also removes state dirs no open sandbox holds.
func (r *Runner) Reap(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	list, err := r.api.ContainerList(cctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true")),
	})
	if err != nil {
		return 0, r.wrap("list containers", err)
	}
	var errs []error
	reaped := 0
	for _, c := range list {
		owner, id := c.Labels[LabelOwner], c.Labels[LabelSandbox]
		switch {
		case owner == r.cfg.InstanceID && r.held(id):
			continue
		case owner != r.cfg.InstanceID:
			alive, known := hostside.OwnerAlive(c.Labels[hostside.LabelOwnerProc])
			if alive || (!known && time.Unix(c.Created, 0).After(r.started.Add(-time.Second))) {
				continue
			}
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		err := r.api.ContainerRemove(rctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		rcancel()
		if err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, r.wrap("remove container "+c.ID, err))
			continue
		}
		if err := hostside.RestoreWorkspace(c.Labels); err != nil {
			errs = append(errs, err)
		}
		reaped++
		r.cfg.Logger.Info("docker runner: reaped orphaned sandbox", "sandbox", id, "container", c.ID, "owner", owner)
	}
	if err := r.reapStateDirs(); err != nil {
		errs = append(errs, err)
	}
	return reaped, errors.Join(errs...)
}

// stateRoot is this instance's part of StateDir: StateDir/<InstanceID>.
func (r *Runner) stateRoot() string { return filepath.Join(r.cfg.StateDir, r.cfg.InstanceID) }

// reapStateDirs removes sandbox dirs of this instance that no open sandbox
// holds, and other instances' dirs older than this runner.
func (r *Runner) reapStateDirs() error {
	var errs []error
	ents, err := os.ReadDir(r.stateRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("docker: read state dir: %w", err))
	}
	for _, e := range ents {
		if !e.IsDir() || r.held(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.stateRoot(), e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	others, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		errs = append(errs, fmt.Errorf("docker: read state dir: %w", err))
	}
	for _, e := range others {
		if !e.IsDir() || e.Name() == r.cfg.InstanceID {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(r.started.Add(-time.Second)) {
			if err := os.RemoveAll(filepath.Join(r.cfg.StateDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) reconcileLoop(ctx context.Context) {
	defer close(r.loopDone)
	hostside.ReapEvery(ctx, r.cfg.ReconcileInterval, func(ctx context.Context) error {
		_, err := r.Reap(ctx)
		return err
	}, r.cfg.Logger, "docker runner")
}
