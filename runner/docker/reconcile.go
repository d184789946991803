package docker

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Reap implements runner.Reaper. It removes managed containers that no
// open Sandbox of this runner holds: those of this InstanceID, and those of
// other owners whose process is dead (hostside.Instance.Orphan: a
// concurrently running sandboxd sharing the daemon keeps its sandboxes).
// It also removes the state dirs no open sandbox holds and those of dead
// instances (hostside.StateRoot.Reap).
func (r *Runner) Reap(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	list, err := r.api.ContainerList(cctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", hostside.LabelManaged+"=true"),
	})
	if err != nil {
		return 0, r.wrap("list containers", err)
	}
	found := make([]hostside.Found, 0, len(list.Items))
	for _, c := range list.Items {
		found = append(found, hostside.Found{ID: c.ID, Labels: c.Labels, Created: time.Unix(c.Created, 0)})
	}
	reaped, live, err := r.host.ReapFound(ctx, found, hostside.ProcOwner, r.removeContainer)
	return reaped, errors.Join(err, r.host.ReapStateDirs(live, os.RemoveAll))
}

// ReapReplica implements runner.ReplicaReaper: the containers labelled
// with replica (hostside.LabelReplica) on the daemon, wherever that
// replica ran.
func (r *Runner) ReapReplica(ctx context.Context, replica string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	list, err := r.api.ContainerList(cctx, client.ContainerListOptions{
		All: true,
		Filters: make(client.Filters).Add("label", hostside.LabelManaged+"=true").
			Add("label", hostside.LabelReplica+"="+replica),
	})
	if err != nil {
		return 0, r.wrap("list containers", err)
	}
	found := make([]hostside.Found, 0, len(list.Items))
	for _, c := range list.Items {
		found = append(found, hostside.Found{ID: c.ID, Labels: c.Labels, Created: time.Unix(c.Created, 0)})
	}
	return r.host.ReapReplica(ctx, replica, found, r.removeContainer)
}

// removeContainer force-removes a container; one already going or gone
// (hostside.Gone) is removed.
func (r *Runner) removeContainer(ctx context.Context, id string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
	defer cancel()
	_, err := r.api.ContainerRemove(rctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !hostside.Gone(err) {
		return r.wrap("remove container "+id, err)
	}
	return nil
}
