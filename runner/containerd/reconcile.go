package containerd

import (
	"github.com/sandboxd/sandboxd/runner/internal/hostside"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// managedFilter selects what this package labels.
const managedFilter = `labels."` + LabelManaged + `"==true`

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

// orphan reports whether a managed object with these labels, created at
// created, belongs to nobody: this instance's objects that no open Sandbox
// holds, and other owners' whose process is dead (the owner-proc label; a
// concurrently running sandboxd sharing the daemon keeps its sandboxes).
// Without that label, objects older than this runner are orphans.
func (r *Runner) orphan(labels map[string]string, created time.Time) bool {
	owner, id := labels[LabelOwner], labels[LabelSandbox]
	if owner == r.cfg.InstanceID {
		return !r.held(id)
	}
	alive, known := hostside.OwnerAlive(labels[hostside.LabelOwnerProc])
	if known {
		return !alive
	}
	return created.Before(r.started.Add(-time.Second))
}

// Reap implements runner.Reaper. It removes, in the runner's namespace,
// the tasks, containers and snapshots of orphaned sandboxes (see orphan),
// and state dirs (with their network namespace pins) no open sandbox holds.
func (r *Runner) Reap(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	list, err := r.c.ContainerService().List(cctx, managedFilter)
	if err != nil {
		return 0, r.wrap("list containers", err)
	}
	var errs []error
	reaped := 0
	liveOwners := map[string]bool{}
	for _, c := range list {
		if !r.orphan(c.Labels, c.CreatedAt) {
			liveOwners[c.Labels[LabelOwner]] = true
			continue
		}
		if err := r.remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := hostside.RestoreWorkspace(c.Labels); err != nil {
			errs = append(errs, err)
		}
		if err := r.removeStateOf(c.Labels[LabelOwner], c.Labels[LabelSandbox]); err != nil {
			errs = append(errs, err)
		}
		reaped++
		r.cfg.Logger.Info("containerd runner: reaped orphaned sandbox", "sandbox", c.Labels[LabelSandbox], "owner", c.Labels[LabelOwner])
	}
	if err := r.reapSnapshots(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := r.reapStateDirs(liveOwners); err != nil {
		errs = append(errs, err)
	}
	return reaped, errors.Join(errs...)
}

// remove kills and deletes a container's task, then the container and its
// snapshot.
func (r *Runner) remove(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	c, err := r.c.LoadContainer(cctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return r.wrap("load container "+id, err)
	}
	if t, err := c.Task(cctx, nil); err == nil {
		// Kill and wait for the stop before deleting: runsc refuses to
		// kill a stopped sandbox, which Delete(WithProcessKill) would do.
		t.Kill(cctx, unix.SIGKILL, client.WithKillAll)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if st, err := t.Status(cctx); err != nil || st.Status == client.Stopped {
				break
			}
		}
		if _, err := t.Delete(cctx); err != nil && !errdefs.IsNotFound(err) {
			if _, err := t.Delete(cctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
				return r.wrap("delete task of "+id, err)
			}
		}
	} else if !errdefs.IsNotFound(err) {
		return r.wrap("load task of "+id, err)
	}
	if err := c.Delete(cctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return r.wrap("delete container "+id, err)
	}
	return nil
}

// reapSnapshots removes managed snapshots whose container is gone (a
// crash between snapshot and container creation) and whose owner is.
func (r *Runner) reapSnapshots(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	sn := r.c.SnapshotService(r.cfg.Snapshotter)
	var orphans []string
	err := sn.Walk(cctx, func(_ context.Context, info snapshots.Info) error {
		if r.orphan(info.Labels, info.Created) {
			orphans = append(orphans, info.Name)
		}
		return nil
	}, managedFilter)
	if err != nil {
		return r.wrap("list snapshots", err)
	}
	var errs []error
	for _, key := range orphans {
		if _, err := r.c.ContainerService().Get(cctx, key); err == nil {
			continue // its container is reaped with it
		}
		if err := sn.Remove(cctx, key); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, r.wrap("remove snapshot "+key, err))
		}
	}
	return errors.Join(errs...)
}

// removeStateOf removes the state dir of a reaped sandbox of another
// instance (its network namespace pin included), and that instance's dir
// once empty. Our own are left to reapStateDirs.
func (r *Runner) removeStateOf(owner, id string) error {
	if owner == r.cfg.InstanceID || !hostside.ValidID(owner) || !hostside.ValidID(id) {
		return nil
	}
	dir := filepath.Join(r.cfg.StateDir, owner, id)
	err := errors.Join(unmountUnder(dir), os.RemoveAll(dir))
	os.Remove(filepath.Join(r.cfg.StateDir, owner)) // fails while not empty
	return err
}

// stateRoot is this instance's part of StateDir: StateDir/<InstanceID>.
func (r *Runner) stateRoot() string { return filepath.Join(r.cfg.StateDir, r.cfg.InstanceID) }

// reapStateDirs removes sandbox dirs of this instance that no open sandbox
// holds, and dirs of other instances older than this runner that hold no
// live sandbox, unmounting the network namespaces pinned inside first.
func (r *Runner) reapStateDirs(liveOwners map[string]bool) error {
	var errs []error
	rm := func(dir string) {
		if err := unmountUnder(dir); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	ents, err := os.ReadDir(r.stateRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("containerd: read state dir: %w", err))
	}
	for _, e := range ents {
		if e.IsDir() && !r.held(e.Name()) {
			rm(filepath.Join(r.stateRoot(), e.Name()))
		}
	}
	others, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		errs = append(errs, fmt.Errorf("containerd: read state dir: %w", err))
	}
	for _, e := range others {
		if !e.IsDir() || e.Name() == r.cfg.InstanceID || liveOwners[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(r.started.Add(-time.Second)) {
			rm(filepath.Join(r.cfg.StateDir, e.Name()))
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) reconcileLoop(ctx context.Context) {
	defer close(r.loopDone)
	hostside.ReapEvery(ctx, r.cfg.ReconcileInterval, func(ctx context.Context) error {
		_, err := r.Reap(ctx)
		return err
	}, r.cfg.Logger, "containerd runner")
}
