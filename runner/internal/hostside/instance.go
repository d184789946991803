package hostside

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runner"
)

// Labels on every managed container (and containerd snapshot).
const (
	LabelManaged = "sandboxd.managed"
	LabelOwner   = "sandboxd.owner"
	LabelSandbox = "sandboxd.sandbox"
	// LabelReplica is the sandboxd replica that made the sandbox
	// (SandboxSpec.Replica), for runner.ReplicaReaper.
	LabelReplica = "sandboxd.replica"
)

// Timeouts of the container runners' daemon calls: a daemon that does not
// answer is unavailable, never a hang.
const (
	APITimeout    = 15 * time.Second // inspect, list, stats, logs, ping
	CreateTimeout = 60 * time.Second // create + start
	RemoveTimeout = 30 * time.Second
	AgentTimeout  = 10 * time.Second // from start until the agent answers a ping
)

// Instance is what the container runners (runner/docker,
// runner/containerd) keep alike for one runner: the IDs of the sandboxes
// it holds (reserved from the start of Create until Close), its part of
// the StateDir, who owns what it finds on the daemon, and the reconcile
// loop. Safe for concurrent use.
type Instance struct {
	Name    string // "docker", "containerd": prefixes errors and logs
	ID      string // the InstanceID, label of everything it creates
	State   *StateRoot
	Log     *slog.Logger
	Started time.Time

	mu   sync.Mutex
	held map[string]bool

	stop     context.CancelFunc
	loopDone chan struct{}
	closing  sync.Once
}

// NewInstance opens the instance's StateRoot (OpenStateRoot: sub is
// where a sandbox's sockets live inside its directory).
func NewInstance(name, stateDir, instanceID, sub string, log *slog.Logger) (*Instance, error) {
	st, err := OpenStateRoot(name, stateDir, instanceID, sub)
	if err != nil {
		return nil, err
	}
	return &Instance{Name: name, ID: instanceID, State: st, Log: log, Started: time.Now(), held: map[string]bool{}}, nil
}

// Reserve claims spec.ID for a Create, so that the reconcile loop leaves
// the half-made sandbox alone: it checks the spec (CheckSpec) and the ID's
// room in the StateDir, and returns spec's limits merged under defaults.
// Release the ID with Forget (Create's rollback, Close).
func (in *Instance) Reserve(ctx context.Context, spec *runner.SandboxSpec, defaults runner.Limits) (runner.Limits, error) {
	if err := ctx.Err(); err != nil {
		return runner.Limits{}, err
	}
	if err := CheckSpec(spec); err != nil {
		return runner.Limits{}, err
	}
	if err := in.State.CheckID(spec.ID); err != nil {
		return runner.Limits{}, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.held[spec.ID] {
		return runner.Limits{}, fmt.Errorf("create sandbox: id %q already in use: %w", spec.ID, runner.ErrInvalidSpec)
	}
	in.held[spec.ID] = true
	return MergeLimits(spec.Limits, defaults), nil
}

// Forget releases a sandbox ID.
func (in *Instance) Forget(id string) {
	in.mu.Lock()
	delete(in.held, id)
	in.mu.Unlock()
}

// Held reports whether this instance holds sandbox id.
func (in *Instance) Held(id string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.held[id]
}

// Abort is Create's rollback after a failure: destroy what was made, then
// release the ID.
func (in *Instance) Abort(ctx context.Context, id string, destroy func(context.Context) error) {
	if err := destroy(ctx); err != nil {
		in.Log.Warn(in.Name+" runner: cleanup after failed create", "sandbox", id, "err", err)
	}
	in.Forget(id)
}

// Labels are the labels of sandbox spec's container: the spec's own and
// the managed and owner labels (ObjectLabels).
func (in *Instance) Labels(spec runner.SandboxSpec) map[string]string {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, in.ObjectLabels(spec.ID))
	if spec.Replica != "" {
		labels[LabelReplica] = spec.Replica
	}
	return labels
}

// ReapReplica removes with remove every object among found that replica
// made (LabelReplica) and this instance does not hold, whether its
// process lives or not: the replica lost its lease. It returns how many
// it removed.
func (in *Instance) ReapReplica(ctx context.Context, replica string, found []Found, remove func(ctx context.Context, id string) error) (int, error) {
	var errs []error
	n := 0
	for _, c := range found {
		if replica == "" || c.Labels[LabelReplica] != replica || (c.Labels[LabelOwner] == in.ID && in.Held(c.Labels[LabelSandbox])) {
			continue
		}
		if err := remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := RestoreWorkspace(c.Labels); err != nil {
			errs = append(errs, err)
		}
		n++
		in.Log.Info(in.Name+" runner: reaped a dead replica's sandbox", "sandbox", c.Labels[LabelSandbox], "container", c.ID, "replica", replica)
	}
	return n, errors.Join(errs...)
}

// ObjectLabels are the labels of what this instance creates for sandbox
// id besides its container (containerd: its snapshot).
func (in *Instance) ObjectLabels(id string) map[string]string {
	l := map[string]string{LabelManaged: "true", LabelOwner: in.ID, LabelSandbox: id}
	if SelfProc() != "" {
		l[LabelOwnerProc] = SelfProc()
	}
	return l
}

// OwnerCheck judges whether the owner recorded in a managed object's
// labels (another instance's) still runs; known is false when the labels
// do not say. A runner whose objects record their owner otherwise than by
// process (runner/kubernetes: by the sandboxd pod) passes its own to
// Orphan and ReapFound; it must answer alive when in doubt.
type OwnerCheck func(labels map[string]string) (alive, known bool)

// ProcOwner is the default OwnerCheck: the owner-proc label's process
// (OwnerAlive), which a sandboxd sharing the host's pid namespace can see.
func ProcOwner(labels map[string]string) (alive, known bool) {
	return OwnerAlive(labels[LabelOwnerProc])
}

// Orphan reports whether a managed object with these labels, created at
// created, belongs to nobody: this instance's objects that it does not
// hold, and other owners' that owner (nil: ProcOwner) finds dead (a
// concurrently running sandboxd sharing the daemon keeps its sandboxes).
// When owner cannot tell, objects older than this instance are orphans.
func (in *Instance) Orphan(labels map[string]string, created time.Time, owner OwnerCheck) bool {
	if labels[LabelOwner] == in.ID {
		return !in.Held(labels[LabelSandbox])
	}
	if owner == nil {
		owner = ProcOwner
	}
	alive, known := owner(labels)
	if known {
		return !alive
	}
	return created.Before(in.Started.Add(-time.Second))
}

// Gone reports whether err from removing an object says it is already
// going or gone: not found, or another sandboxd sharing the daemon is
// removing the same orphan ("removal of container ... is already in
// progress"). Reap counts such an object as reaped.
func Gone(err error) bool {
	return errdefs.IsNotFound(err) || (err != nil && strings.Contains(err.Error(), "is already in progress"))
}

// Found is a managed container a runner found on its daemon.
type Found struct {
	ID      string
	Labels  map[string]string
	Created time.Time
}

// ReapFound removes with remove the orphans among found (Orphan with
// check, nil for ProcOwner; remove treats an object already going as
// removed, see Gone), gives their workspaces back and logs them. It
// returns how many it reaped and the owners that keep live sandboxes,
// whose state ReapStateDirs must keep. One failure does not stop the
// others.
func (in *Instance) ReapFound(ctx context.Context, found []Found, check OwnerCheck, remove func(ctx context.Context, id string) error) (int, map[string]bool, error) {
	var errs []error
	reaped, live := 0, map[string]bool{}
	for _, c := range found {
		owner := c.Labels[LabelOwner]
		if !in.Orphan(c.Labels, c.Created, check) {
			live[owner] = true
			continue
		}
		if err := remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			live[owner] = true // its state goes with it, at a later reconcile
			continue
		}
		if err := RestoreWorkspace(c.Labels); err != nil {
			errs = append(errs, err)
		}
		reaped++
		in.Log.Info(in.Name+" runner: reaped orphaned sandbox", "sandbox", c.Labels[LabelSandbox], "container", c.ID, "owner", owner)
	}
	return reaped, live, errors.Join(errs...)
}

// ReapStateDirs is StateRoot.Reap with the instance's held sandboxes.
func (in *Instance) ReapStateDirs(keep map[string]bool, remove func(dir string) error) error {
	return in.State.Reap(in.Held, keep, remove)
}

// Wrap prefixes an error of daemon operation op with the runner's name;
// one that unavailable says is the daemon's absence (unreachable, no
// answer in time) also wraps runner.ErrDaemonDown and names addr.
func Wrap(name, addr, op string, err error, unavailable func(error) bool) error {
	if err == nil {
		return nil
	}
	if unavailable(err) {
		return fmt.Errorf("%s: %s: daemon at %s unavailable: %w: %w", name, op, addr, runner.ErrDaemonDown, err)
	}
	return fmt.Errorf("%s: %s: %w", name, op, err)
}

// StartReconcile runs reap every interval (not when interval < 0) in the
// background until Close.
func (in *Instance) StartReconcile(ctx context.Context, interval time.Duration, reap func(context.Context) (int, error)) {
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	in.stop, in.loopDone = stop, make(chan struct{})
	go func() {
		defer close(in.loopDone)
		ReapEvery(loopCtx, interval, func(ctx context.Context) error {
			_, err := reap(ctx)
			return err
		}, in.Log, in.Name+" runner")
	}()
}

// Close stops the reconcile loop, then runs closeClient (the runner's
// daemon client) and closes the StateRoot. Open sandboxes are not closed.
// Idempotent.
func (in *Instance) Close(ctx context.Context, closeClient func() error) error {
	var err error
	in.closing.Do(func() {
		if in.stop != nil {
			in.stop()
			select {
			case <-in.loopDone:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if cerr := closeClient(); cerr != nil && err == nil {
			err = cerr
		}
		in.State.Close()
	})
	return err
}

// CloseSandbox is a container sandbox's Close: mark (under the sandbox's
// own lock) marks it closed and returns the channel its first Close closes
// when done, and whether it was closed already; the first call then runs
// destroy, releases the ID and logs a failure (the reconcile loop
// retries). Later calls wait for the first (or ctx) and return nil.
// Cleanup runs even if ctx is cancelled, bounded by destroy's own
// timeouts.
func (in *Instance) CloseSandbox(ctx context.Context, id string, mark func() (done chan struct{}, already bool), destroy func(context.Context) error) error {
	done, already := mark()
	if already {
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	err := destroy(ctx)
	in.Forget(id)
	close(done)
	if err != nil {
		in.Log.Warn(in.Name+" runner: close sandbox (the reconcile loop retries)", "sandbox", id, "err", err)
	}
	return err
}
