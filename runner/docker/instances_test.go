package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// shortTempDir is t.TempDir where a test's name would make the sandboxes'
// socket paths too long (hostside.MaxSocketPath).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeRunnerIn is fakeRunner on a given StateDir.
func fakeRunnerIn(t *testing.T, f *fakeAPI, stateDir string) *Runner {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AgentPath: bin, StateDir: stateDir, ReconcileInterval: -1}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	r, err := newRunner(t.Context(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// Two runners share a StateDir (two sandboxd processes on one host did,
// by default): the one started later leaves the first's state dir alone,
// however old it is, while its owner lives; it removes a dead owner's.
func TestStateDirOfLiveInstanceKept(t *testing.T) {
	t.Parallel()
	state := shortTempDir(t)
	first := fakeRunnerIn(t, &fakeAPI{}, state)
	sandbox := filepath.Join(first.host.State.Dir, "sb1")
	if err := hostside.MakeStateDir(sandbox); err != nil {
		t.Fatal(err)
	}
	// A dead instance's dir: its owner record names a process that is gone.
	dead := filepath.Join(state, "deadinstance")
	if err := os.MkdirAll(filepath.Join(dead, "sb2"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "owner"), []byte("999999999:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	for _, d := range []string{first.host.State.Dir, dead} {
		if err := os.Chtimes(d, hour, hour); err != nil {
			t.Fatal(err)
		}
	}
	_ = fakeRunnerIn(t, &fakeAPI{}, state)
	if _, err := os.Stat(first.host.State.Dir); err != nil {
		t.Fatalf("a live instance's state dir after another started on the same StateDir: %v", err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("a dead instance's state dir: %v, want it removed", err)
	}
}

// removing is a daemon on which another sandboxd is already removing
// every orphan (or has removed it).
type removing struct {
	fakeAPI
	err error
}

func (f *removing) ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error) {
	return client.ContainerListResult{Items: []container.Summary{{ID: "c9", Labels: map[string]string{hostside.LabelManaged: "true",
		hostside.LabelOwner: "gone", hostside.LabelSandbox: "s9", hostside.LabelOwnerProc: "999999999:1"}}}}, nil
}

func (f *removing) ContainerRemove(context.Context, string, client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	return client.ContainerRemoveResult{}, f.err
}

// An orphan another sandboxd is removing, or has removed, is gone: not an
// error of Reap.
func TestReapOrphanAlreadyGoing(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		errdefs.ErrConflict.WithMessage("removal of container c9 is already in progress"),
		errdefs.ErrNotFound.WithMessage("No such container: c9"),
	} {
		f := &removing{err: err}
		r := fakeRunner(t, &f.fakeAPI)
		r.api = f
		if n, rerr := r.Reap(t.Context()); rerr != nil || n != 1 {
			t.Errorf("Reap with %q: %d, %v; want 1 reaped, no error", err, n, rerr)
		}
	}
}

// A StateDir too long for the sandboxes' sockets is refused at New, with
// the limit named, not by every sandbox failing after hostside.AgentTimeout.
func TestStateDirTooLong(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AgentPath: bin, StateDir: filepath.Join(shortTempDir(t), strings.Repeat("long", 15)), ReconcileInterval: -1}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	_, err := newRunner(t.Context(), cfg, &fakeAPI{})
	if err == nil || !strings.Contains(err.Error(), "too long for the sandboxes' unix sockets") {
		t.Fatalf("newRunner with a %d-byte StateDir: %v", len(cfg.StateDir), err)
	}
}

// TestReapReplica: a replica that took over a dead one's work reaps the
// dead one's sandboxes on the shared daemon (ReplicaReaper), by its
// replica label, whether the dead one's process lives or not, and no
// other replica's.
func TestReapReplica(t *testing.T) {
	dead := newTestRunner(t, Config{ReconcileInterval: -1}) // the replica that lost its lease
	taker := newTestRunner(t, Config{ReconcileInterval: -1})
	tok := hostside.NewID()
	mk := func(replica string) runner.Sandbox {
		sb, err := dead.Create(t.Context(), runner.SandboxSpec{Replica: replica, Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	}
	gone, kept := mk("rep-dead-"+tok), mk("rep-live-"+tok)
	n, err := taker.ReapReplica(t.Context(), "rep-dead-"+tok)
	if err != nil || n != 1 {
		t.Fatalf("ReapReplica = %d, %v; want 1", n, err)
	}
	if _, err := taker.api.ContainerInspect(t.Context(), gone.(*Sandbox).ContainerID(), client.ContainerInspectOptions{}); err == nil {
		t.Fatal("the dead replica's container survived ReapReplica")
	}
	if res, err := kept.Exec(t.Context(), runner.Process{Args: []string{"/bin/echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("another replica's sandbox after the reap: %+v %v", res, err)
	}
	if n, err := taker.ReapReplica(t.Context(), "rep-dead-"+tok); err != nil || n != 0 {
		t.Fatalf("second ReapReplica = %d, %v; want 0", n, err)
	}
	if err := gone.Close(t.Context()); err != nil {
		t.Fatalf("Close after the reap: %v", err)
	}
	if left := dead.leftovers(gone.ID()); len(left) > 0 {
		t.Fatalf("left after the reap and Close: %v", left)
	}
}
