package job_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

// One tenant's flood does not take every worker: with two tenants
// configured and four workers, the noisy tenant runs at most three jobs
// (queue.tenant_max_running's default, three quarters of the workers), and
// the quiet tenant's job, submitted after the noisy tenant's twenty, runs
// and finishes while the noisy ones still block.
func TestFairDispatchAcrossTenants(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Tenants = 2 })
	var noisy []*job.Job
	for range 20 {
		noisy = append(noisy, h.submit(t, "noisy", call("wait", `{}`)))
	}
	h.waitRunning(t, "noisy", noisy[0].ID)
	quiet := h.submit(t, "quiet", call("add", `{"a":1,"b":2}`))
	if j := h.wait(t, "quiet", quiet.ID); j.State != job.StateSucceeded {
		t.Fatalf("quiet job %s/%s", j.State, j.Reason)
	}
	running := 0
	for _, n := range noisy {
		j, err := h.svc.Get(t.Context(), "noisy", n.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == job.StateRunning {
			running++
		}
	}
	if running != 3 {
		t.Fatalf("noisy tenant runs %d jobs, want its cap 3", running)
	}
	close(h.gate)
	for _, n := range noisy {
		if j := h.wait(t, "noisy", n.ID); j.State != job.StateSucceeded {
			t.Fatalf("noisy job %s/%s", j.State, j.Reason)
		}
	}
}

// A tenant's own max_running wins over the default cap.
func TestTenantMaxRunning(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Shares = map[string]config.TenantShare{"small": {MaxRunning: 1}}
	})
	a := h.submit(t, "small", call("wait", `{}`))
	b := h.submit(t, "small", call("wait", `{}`))
	h.waitRunning(t, "small", a.ID)
	time.Sleep(100 * time.Millisecond) // b would be running by now without the cap
	if j, _ := h.svc.Get(t.Context(), "small", b.ID); j.State != job.StateQueued {
		t.Fatalf("second job of a tenant capped at 1 is %s", j.State)
	}
	// Another tenant still gets a worker.
	other := h.submit(t, "other", call("add", `{"a":1,"b":2}`))
	if j := h.wait(t, "other", other.ID); j.State != job.StateSucceeded {
		t.Fatalf("other tenant's job %s/%s", j.State, j.Reason)
	}
	close(h.gate)
	if j := h.wait(t, "small", b.ID); j.State != job.StateSucceeded {
		t.Fatalf("capped job %s/%s", j.State, j.Reason)
	}
}
