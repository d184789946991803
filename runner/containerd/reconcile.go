package containerd

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// managedFilter selects what this package labels.
const managedFilter = `labels."` + hostside.LabelManaged + `"==true`

// Reap implements runner.Reaper. It removes, in the runner's namespace,
// the tasks, containers and snapshots of orphaned sandboxes (this
// instance's that no open Sandbox holds, other owners' whose process is
// dead: hostside.Instance.Orphan), the state dirs (with their network
// namespace pins) no open sandbox holds and those of dead instances
// (hostside.StateRoot.Reap).
func (r *Runner) Reap(ctx context.Context) (int, error) {
	found, err := r.managed(ctx)
	if err != nil {
		return 0, err
	}
	reaped, live, err := r.host.ReapFound(ctx, found, hostside.ProcOwner, r.remove)
	return reaped, errors.Join(err, r.reapSnapshots(ctx), r.host.ReapStateDirs(live, removeStateDir))
}

// ReapReplica implements runner.ReplicaReaper: the containers labelled
// with replica (hostside.LabelReplica) in the runner's namespace,
// wherever that replica ran.
func (r *Runner) ReapReplica(ctx context.Context, replica string) (int, error) {
	found, err := r.managed(ctx)
	if err != nil {
		return 0, err
	}
	return r.host.ReapReplica(ctx, replica, found, r.remove)
}

// managed lists the sandboxd-managed containers of the runner's namespace.
func (r *Runner) managed(ctx context.Context) ([]hostside.Found, error) {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	list, err := r.c.ContainerService().List(cctx, managedFilter)
	if err != nil {
		return nil, r.wrap("list containers", err)
	}
	found := make([]hostside.Found, 0, len(list))
	for _, c := range list {
		found = append(found, hostside.Found{ID: c.ID, Labels: c.Labels, Created: c.CreatedAt})
	}
	return found, nil
}

// remove kills and deletes a container's task, then the container and its
// snapshot.
func (r *Runner) remove(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
	defer cancel()
	c, err := r.c.LoadContainer(cctx, id)
	if hostside.Gone(err) {
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
	if err := c.Delete(cctx, client.WithSnapshotCleanup); err != nil && !hostside.Gone(err) {
		return r.wrap("delete container "+id, err)
	}
	return nil
}

// reapSnapshots removes managed snapshots whose container is gone (a
// crash between snapshot and container creation) and whose owner is.
func (r *Runner) reapSnapshots(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	sn := r.c.SnapshotService(r.cfg.Snapshotter)
	var orphans []string
	err := sn.Walk(cctx, func(_ context.Context, info snapshots.Info) error {
		if r.host.Orphan(info.Labels, info.Created, hostside.ProcOwner) {
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
		if err := sn.Remove(cctx, key); err != nil && !hostside.Gone(err) {
			errs = append(errs, r.wrap("remove snapshot "+key, err))
		}
	}
	return errors.Join(errs...)
}

// removeStateDir removes a state dir, unmounting the network namespaces
// pinned inside first.
func removeStateDir(dir string) error {
	return errors.Join(unmountUnder(dir), os.RemoveAll(dir))
}
