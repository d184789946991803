package docker

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// fakeAPI is a daemon that is up for Info and List but whose container
// calls fail with err (a dead or dying daemon by default).
type fakeAPI struct {
	err     error
	created int
	removed []string
}

var errDead = &net.OpError{Op: "dial", Net: "unix", Err: errors.New("connection refused")}

func (f *fakeAPI) Info(context.Context, client.InfoOptions) (client.SystemInfoResult, error) {
	return client.SystemInfoResult{Info: system.Info{SecurityOptions: []string{"name=seccomp,profile=default"}, MemoryLimit: true, PidsLimit: true, CPUCfsQuota: true}}, nil
}
func (f *fakeAPI) ContainerCreate(context.Context, client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	f.created++
	if f.created > 1 {
		return client.ContainerCreateResult{}, f.err
	}
	return client.ContainerCreateResult{ID: "c1"}, nil
}
func (f *fakeAPI) ContainerStart(context.Context, string, client.ContainerStartOptions) (client.ContainerStartResult, error) {
	return client.ContainerStartResult{}, f.err
}
func (f *fakeAPI) ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	return client.ContainerInspectResult{}, f.err
}
func (f *fakeAPI) ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error) {
	return client.ContainerListResult{}, nil
}
func (f *fakeAPI) ContainerLogs(context.Context, string, client.ContainerLogsOptions) (client.ContainerLogsResult, error) {
	return nil, f.err
}
func (f *fakeAPI) ContainerStats(context.Context, string, client.ContainerStatsOptions) (client.ContainerStatsResult, error) {
	return client.ContainerStatsResult{}, f.err
}
func (f *fakeAPI) ContainerKill(context.Context, string, client.ContainerKillOptions) (client.ContainerKillResult, error) {
	return client.ContainerKillResult{}, nil
}

func (f *fakeAPI) ContainerRemove(_ context.Context, id string, _ client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	f.removed = append(f.removed, id)
	return client.ContainerRemoveResult{}, nil
}
func (f *fakeAPI) Close() error { return nil }

func fakeRunner(t *testing.T, f *fakeAPI) *Runner {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AgentPath: bin, StateDir: shortTempDir(t), ReconcileInterval: -1}
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

func TestCreateDaemonDies(t *testing.T) {
	t.Parallel()
	f := &fakeAPI{err: errDead}
	r := fakeRunner(t, f)
	// Create succeeds, start finds the daemon gone: ErrUnavailable and
	// the created container and state dir are removed.
	_, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), ID: "s1"})
	if !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("Create: %v, want ErrUnavailable", err)
	}
	if len(f.removed) != 1 || f.removed[0] != "c1" {
		t.Fatalf("removed %v, want [c1]", f.removed)
	}
	if _, err := os.Stat(filepath.Join(r.host.State.Dir, "s1")); err == nil {
		t.Fatal("state dir left behind")
	}
	if _, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), ID: "s1"}); !errors.Is(err, runner.ErrUnavailable) {
		t.Fatalf("second Create: %v, want ErrUnavailable", err)
	}
}

func TestCreateInvalid(t *testing.T) {
	t.Parallel()
	r := fakeRunner(t, &fakeAPI{err: errDead})
	bogusWS, bogusNet := *runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), *runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	bogusWS.Workspace, bogusNet.Network = "bogus", "bogus"
	for _, tc := range []struct {
		spec runner.SandboxSpec
		want error
	}{
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), ID: "../x"}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{Workspace: "relative", Isolation: runnertest.Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{Isolation: &bogusWS}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{Isolation: &bogusNet}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{}, runner.ErrInvalidSpec},                                                                            // no compiled isolation
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress)}, runner.ErrInvalidSpec}, // no Egress
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Limits: runner.Limits{MemoryBytes: -1}}, runner.ErrInvalidSpec},
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Labels: map[string]string{hostside.LabelOwner: "me"}}, runner.ErrInvalidSpec},
	} {
		if _, err := r.Create(t.Context(), tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("Create(%+v) = %v, want %v", tc.spec, err, tc.want)
		}
	}
}

func TestLimitsAreCeilings(t *testing.T) {
	t.Parallel()
	def := hostside.DefaultLimits
	got := hostside.MergeLimits(runner.Limits{MemoryBytes: 64 << 20, PIDs: 1 << 20, Timeout: time.Hour}, def)
	if got.MemoryBytes != 64<<20 || got.PIDs != def.PIDs || got.Timeout != def.Timeout || got.NoFile != def.NoFile {
		t.Fatalf("mergeLimits = %+v", got)
	}
}
