package hostside

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runner"
)

// shortTempDir is t.TempDir where a test's name would make socket paths
// too long.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// liveProc starts a process that outlives the test's checks: an owner
// that is another live sandboxd.
func liveProc(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return ProcIdentity(cmd.Process.Pid)
}

func writeInstance(t *testing.T, base, name, owner string, sandboxes ...string) string {
	t.Helper()
	dir := filepath.Join(base, name)
	for _, sb := range append([]string{""}, sandboxes...) {
		if err := os.MkdirAll(filepath.Join(dir, sb), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if owner != "" {
		if err := os.WriteFile(filepath.Join(dir, OwnerRecord), []byte(owner+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Reap removes this instance's unheld sandbox dirs and the dirs of dead
// owners, whatever their age; live owners' dirs, those the caller keeps,
// and those without a record stay, however old.
func TestStateRootReap(t *testing.T) {
	t.Parallel()
	base := shortTempDir(t)
	live := writeInstance(t, base, "live", liveProc(t), "a")
	dead := writeInstance(t, base, "dead", "999999999:1", "b")
	kept := writeInstance(t, base, "kept", "999999999:1", "c")
	unknown := writeInstance(t, base, "unknown", "", "d")
	hour := time.Now().Add(-time.Hour)
	for _, d := range []string{live, dead, kept, unknown} {
		os.Chtimes(d, hour, hour)
	}
	st, err := OpenStateRoot("test", base, "me", "run")
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []string{"held", "stale"} {
		if err := os.Mkdir(st.Sandbox(sb), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var removed []string
	err = st.Reap(func(id string) bool { return id == "held" }, map[string]bool{"kept": true}, func(dir string) error {
		removed = append(removed, dir)
		return os.RemoveAll(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(removed) != fmt.Sprint([]string{st.Sandbox("stale"), dead}) {
		t.Fatalf("removed %v, want this instance's unheld sandbox and the dead instance", removed)
	}
	for _, d := range []string{live, kept, unknown, st.Sandbox("held")} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	// The record is this process; Close leaves it while a sandbox dir
	// remains, and removes both once none does.
	if b, _ := os.ReadFile(filepath.Join(st.Dir, OwnerRecord)); strings.TrimSpace(string(b)) != SelfProc() {
		t.Fatalf("owner record %q, want %q", b, SelfProc())
	}
	st.Close()
	if _, err := os.Stat(filepath.Join(st.Dir, OwnerRecord)); err != nil {
		t.Fatalf("owner record removed while a sandbox dir is left: %v", err)
	}
	os.Remove(st.Sandbox("held"))
	st.Close()
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Fatalf("instance dir after Close: %v", err)
	}
}

// An instance directory whose record names another live process is
// refused (two runners with one InstanceID); a dead owner's is taken over.
func TestStateRootOwnedByAnother(t *testing.T) {
	t.Parallel()
	base := shortTempDir(t)
	writeInstance(t, base, "busy", liveProc(t))
	if _, err := OpenStateRoot("docker", base, "busy", ""); err == nil || !strings.Contains(err.Error(), "belongs to another live process") {
		t.Fatalf("OpenStateRoot on a live owner's dir: %v", err)
	}
	writeInstance(t, base, "old", "999999999:1", "sb")
	st, err := OpenStateRoot("docker", base, "old", "")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(st.Dir, OwnerRecord)); strings.TrimSpace(string(b)) != SelfProc() {
		t.Fatalf("owner record %q after taking over", b)
	}
}

// A StateDir too long for the sandboxes' sockets is refused at start with
// the path and the limit; one that fits binds a socket at the longest
// path an accepted ID gives, and an ID longer than that is refused.
func TestStateRootSocketRoom(t *testing.T) {
	t.Parallel()
	short := shortTempDir(t)
	long := filepath.Join(short, strings.Repeat("d", 50))
	_, err := OpenStateRoot("containerd", long, "0123456789abcdef", "run")
	if err == nil || !strings.Contains(err.Error(), "too long for the sandboxes' unix sockets") || !strings.Contains(err.Error(), "107") {
		t.Fatalf("OpenStateRoot(%d-byte dir) = %v, want the socket limit named", len(long), err)
	}
	if _, err := os.Stat(long); !os.IsNotExist(err) {
		t.Fatal("a refused StateDir was created")
	}
	for _, sub := range []string{"", "run"} {
		st, err := OpenStateRoot("test", short, "i"+sub, sub)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.Repeat("x", st.room)
		if err := st.CheckID(id); err != nil {
			t.Fatal(err)
		}
		if err := st.CheckID(id + "x"); !errors.Is(err, runner.ErrInvalidSpec) {
			t.Fatalf("CheckID of a too long id: %v", err)
		}
		sock := st.socketPath(id)
		if len(sock) != MaxSocketPath {
			t.Fatalf("longest socket path %d bytes, want %d", len(sock), MaxSocketPath)
		}
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatalf("listen on a %d-byte path: %v", len(sock), err)
		}
		ln.Close()
		if _, err := net.Listen("unix", sock+"x"); err == nil {
			t.Fatalf("a %d-byte socket path was accepted: MaxSocketPath is too low", len(sock)+1)
		}
	}
}

func TestOrphan(t *testing.T) {
	t.Parallel()
	in, err := NewInstance("test", shortTempDir(t), "me", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	in.held["held"] = true
	old, recent := time.Now().Add(-time.Hour), time.Now()
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		created time.Time
		want    bool
	}{
		{"ours, held", map[string]string{LabelOwner: "me", LabelSandbox: "held"}, old, false},
		{"ours, not held", map[string]string{LabelOwner: "me", LabelSandbox: "gone"}, recent, true},
		{"other, live owner", map[string]string{LabelOwner: "x", LabelOwnerProc: SelfProc()}, old, false},
		{"other, dead owner, recent", map[string]string{LabelOwner: "x", LabelOwnerProc: "999999999:1"}, recent, true},
		{"other, unknown owner, old", map[string]string{LabelOwner: "x"}, old, true},
		{"other, unknown owner, recent", map[string]string{LabelOwner: "x"}, recent, false},
	} {
		for _, owner := range []OwnerCheck{nil, ProcOwner} {
			if got := in.Orphan(tc.labels, tc.created, owner); got != tc.want {
				t.Errorf("%s: orphan = %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// An OwnerCheck of the runner's own judges other owners in place of their
// process; this instance's objects keep the held rule, and an owner it
// cannot tell falls back to the age rule.
func TestOrphanOwnerCheck(t *testing.T) {
	t.Parallel()
	in, err := NewInstance("test", shortTempDir(t), "me", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	in.held["held"] = true
	owner := func(l map[string]string) (alive, known bool) {
		switch l["owner-pod"] {
		case "live":
			return true, true
		case "dead":
			return false, true
		}
		return false, false
	}
	old, recent := time.Now().Add(-time.Hour), time.Now()
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		created time.Time
		want    bool
	}{
		{"ours, held, pod says dead", map[string]string{LabelOwner: "me", LabelSandbox: "held", "owner-pod": "dead"}, old, false},
		{"ours, not held, pod says live", map[string]string{LabelOwner: "me", LabelSandbox: "gone", "owner-pod": "live"}, recent, true},
		{"other, live pod, dead proc", map[string]string{LabelOwner: "x", "owner-pod": "live", LabelOwnerProc: "999999999:1"}, old, false},
		{"other, dead pod, live proc", map[string]string{LabelOwner: "x", "owner-pod": "dead", LabelOwnerProc: SelfProc()}, recent, true},
		{"other, unknown, old", map[string]string{LabelOwner: "x"}, old, true},
		{"other, unknown, recent", map[string]string{LabelOwner: "x"}, recent, false},
	} {
		if got := in.Orphan(tc.labels, tc.created, owner); got != tc.want {
			t.Errorf("%s: orphan = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// ReapFound removes orphans only, goes on after a failure, and keeps the
// state of owners with live sandboxes and of those it failed to reap.
func TestReapFound(t *testing.T) {
	t.Parallel()
	in, err := NewInstance("test", shortTempDir(t), "me", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dead := "999999999:1"
	found := []Found{
		{ID: "c1", Labels: map[string]string{LabelOwner: "a", LabelOwnerProc: dead}},
		{ID: "c2", Labels: map[string]string{LabelOwner: "b", LabelOwnerProc: dead}},
		{ID: "c3", Labels: map[string]string{LabelOwner: "c", LabelOwnerProc: SelfProc()}},
		{ID: "c4", Labels: map[string]string{LabelOwner: "d", LabelOwnerProc: dead}},
	}
	var removed []string
	n, live, err := in.ReapFound(t.Context(), found, nil, func(_ context.Context, id string) error {
		if id == "c2" {
			return errors.New("busy")
		}
		removed = append(removed, id)
		return nil
	})
	if n != 2 || fmt.Sprint(removed) != "[c1 c4]" || err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("ReapFound = %d %v (removed %v)", n, err, removed)
	}
	if !live["b"] || !live["c"] || live["a"] || live["d"] {
		t.Fatalf("live owners %v, want b (failed) and c (alive)", live)
	}
}

func TestGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		gone bool
	}{
		{nil, false},
		{errdefs.ErrNotFound.WithMessage("No such container: c9"), true},
		{fmt.Errorf("remove: %w", errdefs.ErrConflict.WithMessage("removal of container c9 is already in progress")), true},
		{errdefs.ErrConflict.WithMessage("container is running"), false},
		{errors.New("connection refused"), false},
	} {
		if got := Gone(tc.err); got != tc.gone {
			t.Errorf("Gone(%v) = %v, want %v", tc.err, got, tc.gone)
		}
	}
}

// CloseSandbox runs destroy once; a second Close waits for the first.
func TestCloseSandbox(t *testing.T) {
	t.Parallel()
	in, err := NewInstance("test", shortTempDir(t), "me", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	spec := runner.SandboxSpec{ID: "sb", Isolation: iso(runner.WorkspaceNone, runner.NetworkNone)}
	if _, err := in.Reserve(t.Context(), &spec, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Reserve(t.Context(), &runner.SandboxSpec{ID: "sb", Isolation: iso(runner.WorkspaceNone, runner.NetworkNone)}, DefaultLimits); !errors.Is(err, runner.ErrInvalidSpec) {
		t.Fatalf("second Reserve of one ID: %v", err)
	}
	var mu sync.Mutex
	var closed bool
	var done chan struct{}
	mark := func() (chan struct{}, bool) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return done, true
		}
		closed, done = true, make(chan struct{})
		return done, false
	}
	release := make(chan struct{})
	calls := 0
	destroy := func(context.Context) error { calls++; <-release; return errors.New("busy mount") }
	first := make(chan error)
	go func() { first <- in.CloseSandbox(t.Context(), "sb", mark, destroy) }()
	time.Sleep(10 * time.Millisecond)
	if !in.Held("sb") {
		t.Fatal("released before destroy ended")
	}
	second := make(chan error)
	go func() { second <- in.CloseSandbox(t.Context(), "sb", mark, destroy) }()
	close(release)
	if err := <-first; err == nil {
		t.Fatal("first Close hid destroy's error")
	}
	if err := <-second; err != nil || calls != 1 || in.Held("sb") {
		t.Fatalf("second Close: %v, destroy ran %d times, held %v", err, calls, in.Held("sb"))
	}
}
