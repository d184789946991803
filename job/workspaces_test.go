package job_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/store"
)

// failingReaper is a runner whose Reap fails: another sandboxd removing
// the same orphan, a daemon that answers late.
type failingReaper struct{ *fakeRunner }

func (failingReaper) Reap(context.Context) (int, error) {
	return 0, errors.New("docker: remove container c9: removal of container c9 is already in progress")
}

// startService is a started service on dir (its database and WorkDir)
// over r.
func startService(t *testing.T, dir string, r runner.Runner, prom *prometheus.Registry, before func(*job.Service)) *job.Service {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := job.New(job.Config{WorkDir: filepath.Join(dir, "work"), Metrics: job.NewMetrics(prom), Egress: &nopEgress{}}, st, testTools(t, nil), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
		st.Close()
	})
	if before != nil {
		before(svc)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return svc
}

// One failed reap never stops the daemon from starting: the runner's
// reconcile loop retries it.
func TestStartSurvivesReapFailure(t *testing.T) {
	t.Parallel()
	svc := startService(t, t.TempDir(), failingReaper{&fakeRunner{}}, prometheus.NewRegistry(), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	q, _, err := svc.Submit(ctx, "acme", call("echo", `{"text":"up"}`))
	if err != nil {
		t.Fatal(err)
	}
	if j, err := svc.Wait(ctx, "acme", q.ID); err != nil || j.State != job.StateSucceeded {
		t.Fatalf("job after a failed reap: %+v, %v", j, err)
	}
}

// Start removes every workspace no live job or session owns: a crash left
// the workspaces of jobs (lost, or killed between their result and their
// cleanup), of sessions, of pooled sandboxes and an archive spool. A
// session this process created before Start keeps its own.
func TestStartRemovesStaleWorkspaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	stale := []string{"job_06h0lost", "job_06h0finished", "pool/pool_06h0old", "sessions/ses_06h0old", "archive-123"}
	for _, p := range stale {
		full := filepath.Join(work, p)
		if filepath.Base(p) == "archive-123" {
			os.MkdirAll(work, 0o755)
			if err := os.WriteFile(full, []byte("spool"), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(full, "left.txt"), []byte("left by the crash"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var live *job.Session
	svc := startService(t, dir, &fakeRunner{}, prometheus.NewRegistry(), func(svc *job.Service) {
		var err error
		if live, err = svc.CreateSession(t.Context(), "acme", job.SessionRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	for _, p := range stale {
		if _, err := os.Stat(filepath.Join(work, p)); !os.IsNotExist(err) {
			t.Errorf("%s after Start: %v, want it removed", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "sessions", live.ID)); err != nil {
		t.Errorf("a live session's workspace after Start: %v", err)
	}
	if s, err := svc.GetSession(t.Context(), "acme", live.ID); err != nil || s.State != job.SessionActive {
		t.Errorf("live session after Start: %+v, %v", s, err)
	}
}

// A cleanup that fails (a workspace file made immutable from the host) is
// kept on a list, exported in /metrics (count and size) and retried until
// it succeeds.
func TestCleanupRetried(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chattr +i needs root")
	}
	dir := t.TempDir()
	prom := prometheus.NewRegistry()
	svc := startService(t, dir, &fakeRunner{}, prom, nil)
	sess, err := svc.CreateSession(t.Context(), "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "work", "sessions", sess.ID)
	pinned := filepath.Join(ws, "pinned.txt")
	if err := os.WriteFile(pinned, make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", pinned).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	unpin := func() { exec.Command("chattr", "-i", pinned).Run() }
	defer unpin()
	if _, err := svc.CloseSession(t.Context(), "acme", sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pinned); err != nil {
		t.Fatalf("the immutable file is gone: %v", err)
	}
	gauge := func(name string) float64 {
		v := metricValues(t, prom, name, nil)
		if len(v) != 1 {
			t.Fatalf("%s: %v", name, v)
		}
		return v[0]
	}
	if n, b := gauge("sandboxd_cleanup_pending"), gauge("sandboxd_cleanup_pending_bytes"); n != 1 || b != 5000 {
		t.Fatalf("pending cleanups %v (%v bytes), want 1 (5000)", n, b)
	}
	unpin()
	deadline := time.Now().Add(20 * time.Second)
	for gauge("sandboxd_cleanup_pending") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cleanup was not retried")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace after the retry: %v", err)
	}
	if b := gauge("sandboxd_cleanup_pending_bytes"); b != 0 {
		t.Fatalf("pending bytes %v after the retry", b)
	}
}
