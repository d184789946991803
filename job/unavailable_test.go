package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
)

// downRunner's Create fails with err (the runner's daemon down, the disk
// full).
type downRunner struct {
	*fake.Runner
	err error
}

func (r *downRunner) Create(context.Context, runner.SandboxSpec) (runner.Sandbox, error) {
	return nil, r.err
}

// A runner outage and a full disk are named, not "internal": a job failing
// for them has reason unavailable or disk_full and a result naming the
// cause, and a session's creation is ErrUnavailable or ErrHostDiskFull
// (the API's 503 with Retry-After).
func TestRunnerOutageAndDiskFullReasons(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		reason   string
		sentinel error
		mention  string
	}{
		{"runner down", fmt.Errorf("create sandbox: docker daemon at unix:///run/x.sock: %w: connection refused", runner.ErrUnavailable),
			job.ReasonUnavailable, job.ErrUnavailable, "unix:///run/x.sock"},
		{"disk full", fmt.Errorf("create workspace: write /var/lib/sandboxd/workspaces/x: %w", syscall.ENOSPC),
			job.ReasonDiskFull, job.ErrHostDiskFull, "no space left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSessHarness(t, &downRunner{Runner: fake.New(), err: tc.err}, job.Config{})
			j := h.run(t, "acme", "", "sh", `{"cmd":"true"}`)
			if j.State != job.StateFailed || j.Reason != tc.reason {
				t.Fatalf("job %s/%s, want failed/%s", j.State, j.Reason, tc.reason)
			}
			if j.Result == nil || !strings.Contains(j.Result.Error, tc.mention) || strings.HasPrefix(j.Result.Error, "internal error") {
				t.Fatalf("result error %q, want the cause (%q)", j.Result.Error, tc.mention)
			}
			_, err := h.svc.CreateSession(t.Context(), "acme", job.SessionRequest{})
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("CreateSession: %v, want %v naming %q", err, tc.sentinel, tc.mention)
			}
		})
	}
	// Anything else stays internal.
	h := newSessHarness(t, &downRunner{Runner: fake.New(), err: errors.New("boom")}, job.Config{})
	if j := h.run(t, "acme", "", "sh", `{"cmd":"true"}`); j.Reason != job.ReasonInternal {
		t.Fatalf("other failure: reason %s", j.Reason)
	}
}
