package job_test

import (
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
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

// With two or more tenants, a tenant's sandboxes are in its CPU group
// (runner.SandboxSpec.Tenant, of its weight), pooled ones too: the pool
// keeps ready sandboxes per tenant, from the tenant's first job on.
func TestTenantCPUGroupSpec(t *testing.T) {
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Tenants = 2
		c.Shares = map[string]config.TenantShare{"gold": {Weight: 300}}
		c.Pool = config.Pool{Size: ptr(1)}
	})
	specs := func() []runner.SandboxSpec {
		h.r.mu.Lock()
		defer h.r.mu.Unlock()
		return slices.Clone(h.r.specs)
	}
	first := h.wait(t, "gold", h.submit(t, "gold", call("echo", `{"text":"x"}`)).ID)
	if first.State != job.StateSucceeded {
		t.Fatalf("job %s/%s", first.State, first.Reason)
	}
	// Nothing was pre-warmed without a tenant; the first job missed.
	spec, ok := h.r.spec(first.ID)
	if !ok || spec.Tenant != "gold" || spec.TenantWeight != 300 {
		t.Fatalf("the job's sandbox: %+v (created %v)", spec, ok)
	}
	eventually(t, "a pooled sandbox of gold", func() bool {
		for _, s := range specs() {
			if strings.HasPrefix(s.ID, "pool_") && s.Tenant == "gold" && s.TenantWeight == 300 {
				return true
			}
		}
		return false
	})
	second := h.wait(t, "gold", h.submit(t, "gold", call("echo", `{"text":"x"}`)).ID)
	if _, fresh := h.r.spec(second.ID); fresh || second.State != job.StateSucceeded {
		t.Fatalf("second job of gold %s, fresh sandbox %v: want a pooled one", second.State, fresh)
	}
	other := h.wait(t, "plain", h.submit(t, "plain", call("echo", `{"text":"x"}`)).ID)
	if spec, _ := h.r.spec(other.ID); spec.Tenant != "plain" || spec.TenantWeight != 0 {
		t.Fatalf("plain tenant's sandbox: tenant %q weight %d", spec.Tenant, spec.TenantWeight)
	}
	for _, s := range specs() {
		if s.Tenant == "" {
			t.Fatalf("a sandbox outside every tenant's group: %+v", s)
		}
	}
}

// With one tenant there is nobody to share with: no tenant groups.
func TestSingleTenantNoCPUGroup(t *testing.T) {
	h := newHarness(t)
	j := h.wait(t, "acme", h.submit(t, "acme", call("echo", `{"text":"x"}`)).ID)
	if spec, ok := h.r.spec(j.ID); !ok || spec.Tenant != "" {
		t.Fatalf("spec %+v (created %v)", spec, ok)
	}
}

// The kill is sent at the deadline counted from the job's start, however
// long the sandbox took to make: with a Create of 700 ms and a timeout of
// 1 s, the killed event is at started + 1 s (not 1.7 s), and the result
// says the timeout.
func TestKillAtDeadlineFromStart(t *testing.T) {
	h := newHarness(t, func(_ *job.Config, h *harness) { h.r.createDelay = 700 * time.Millisecond })
	j := h.wait(t, "acme", h.submit(t, "acme", call("sh", `{"cmd":"sleep","arg":"10s","timeout_ms":1000}`)).ID)
	if j.State != job.StateFailed || j.Reason != job.ReasonTimeout || j.Result.Error != "timed out after 1s" {
		t.Fatalf("job %s/%s %q", j.State, j.Reason, j.Result.Error)
	}
	var started, killed time.Time
	eventually(t, "the finished event persisted", func() bool {
		evs, err := h.st.ListEvents(t.Context(), j.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			switch ev.Type {
			case job.EventStarted:
				started = ev.Time
			case job.EventKilled:
				killed = ev.Time
			}
		}
		return len(evs) > 0 && evs[len(evs)-1].Type == job.EventFinished
	})
	if started.IsZero() || killed.IsZero() {
		t.Fatalf("started %v killed %v", started, killed)
	}
	if over := killed.Sub(started.Add(time.Second)); over < -10*time.Millisecond || over > 200*time.Millisecond {
		t.Fatalf("kill %v after the deadline", over)
	}
}

// While two tenants' sandboxed jobs run, each tenant's group is capped at
// its weighted share of the host's CPUs, and the cap is in place before
// the second tenant's job runs; a tenant running alone is uncapped.
func TestTenantCPUCapsWhileCompeting(t *testing.T) {
	h := newHarness(t, func(c *job.Config, h *harness) {
		c.Tenants = 2
		c.Shares = map[string]config.TenantShare{"gold": {Weight: 300}}
		h.r.started = make(chan string, 8)
	})
	ncpu := int64(runtime.NumCPU()) * 1000
	execStarted := func(id string) { // the job's command started in its sandbox
		t.Helper()
		for {
			select {
			case got := <-h.r.started:
				if got == id {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("job %s's command never started", id)
			}
		}
	}
	gold := h.submit(t, "gold", call("sh", `{"cmd":"sleep","arg":"3s"}`))
	execStarted(gold.ID)
	if c := h.r.caps(); len(c) != 0 {
		t.Fatalf("caps with one tenant running: %v, want none", c)
	}
	plain := h.submit(t, "plain", call("sh", `{"cmd":"sleep","arg":"1s"}`))
	execStarted(plain.ID)
	// The cap was written before plain's command started.
	want := map[string]int64{"gold": ncpu * 300 / 400, "plain": ncpu * 100 / 400}
	if c := h.r.caps(); !maps.Equal(c, want) {
		t.Fatalf("caps while both run: %v, want %v", c, want)
	}
	if j := h.wait(t, "plain", plain.ID); j.State != job.StateSucceeded {
		t.Fatalf("plain's job %s/%s", j.State, j.Reason)
	}
	eventually(t, "gold uncapped once alone", func() bool { return len(h.r.caps()) == 0 })
	if j := h.wait(t, "gold", gold.ID); j.State != job.StateSucceeded {
		t.Fatalf("gold's job %s/%s", j.State, j.Reason)
	}
	if c := h.r.caps(); len(c) != 0 {
		t.Fatalf("caps after both ended: %v", c)
	}
}
