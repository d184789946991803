package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

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

func (f *fakeAPI) Ping(context.Context) (types.Ping, error) { return types.Ping{}, nil }
func (f *fakeAPI) Info(context.Context) (system.Info, error) {
	return system.Info{SecurityOptions: []string{"name=seccomp,profile=default"}, MemoryLimit: true, PidsLimit: true, CPUCfsQuota: true}, nil
}
func (f *fakeAPI) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	f.created++
	if f.created > 1 {
		return container.CreateResponse{}, f.err
	}
	return container.CreateResponse{ID: "c1"}, nil
}
func (f *fakeAPI) ContainerStart(context.Context, string, container.StartOptions) error { return f.err }
func (f *fakeAPI) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	return container.InspectResponse{}, f.err
}
func (f *fakeAPI) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	return nil, nil
}
func (f *fakeAPI) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return nil, f.err
}
func (f *fakeAPI) ContainerStatsOneShot(context.Context, string) (container.StatsResponseReader, error) {
	return container.StatsResponseReader{}, f.err
}
func (f *fakeAPI) ContainerKill(context.Context, string, string) error { return nil }

func (f *fakeAPI) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	f.removed = append(f.removed, id)
	return nil
}
func (f *fakeAPI) Close() error { return nil }

func fakeRunner(t *testing.T, f *fakeAPI) *Runner {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AgentPath: bin, StateDir: t.TempDir(), ReconcileInterval: -1}
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
	if _, err := os.Stat(filepath.Join(r.stateRoot(), "s1")); err == nil {
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
		{runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone), Labels: map[string]string{LabelOwner: "me"}}, runner.ErrInvalidSpec},
	} {
		if _, err := r.Create(t.Context(), tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("Create(%+v) = %v, want %v", tc.spec, err, tc.want)
		}
	}
}

func TestLimitsAreCeilings(t *testing.T) {
	t.Parallel()
	def := builtinDefaults
	got := hostside.MergeLimits(runner.Limits{MemoryBytes: 64 << 20, PIDs: 1 << 20, Timeout: time.Hour}, def)
	if got.MemoryBytes != 64<<20 || got.PIDs != def.PIDs || got.Timeout != def.Timeout || got.NoFile != def.NoFile {
		t.Fatalf("mergeLimits = %+v", got)
	}
}
