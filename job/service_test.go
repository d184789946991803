package job_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

func TestSubmitWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name    string
		req     job.SubmitRequest
		state   job.State
		reason  string
		content string // substring of Result.Content
		errText string // substring of Result.Error
		effects []tools.Effect
	}{
		{"sandboxed ok", call("echo", `{"text":"hello"}`), job.StateSucceeded, "", "hello", "", []tools.Effect{tools.EffectExec}},
		{"args as a JSON string", call("echo", `"{\"text\":\"str\"}"`), job.StateSucceeded, "", "str", "", []tools.Effect{tools.EffectExec}},
		{"in-process ok", call("add", `{"a":2,"b":3}`), job.StateSucceeded, "", "5", "", nil},
		{"exit code", call("sh", `{"cmd":"exit","arg":"3"}`), job.StateFailed, job.ReasonToolError, "bye", "code 3",
			[]tools.Effect{tools.EffectExec, tools.EffectFileWrite, tools.EffectHTTP}},
		{"command refused", call("sh", `{"cmd":"refuse"}`), job.StateFailed, job.ReasonToolError, "", "refusing", nil},
		{"sandbox timeout", call("sh", `{"cmd":"sleep","arg":"1h","timeout_ms":20}`), job.StateFailed, job.ReasonTimeout, "", "timed out",
			[]tools.Effect{tools.EffectExec, tools.EffectFileWrite, tools.EffectHTTP}},
		{"limit timeout", job.SubmitRequest{Call: tools.Call{Name: "wait"}, Limits: runner.Limits{Timeout: 20 * time.Millisecond}},
			job.StateFailed, job.ReasonTimeout, "", "timed out", nil},
		{"runner error", call("sh", `{"cmd":"error"}`), job.StateFailed, job.ReasonInternal, "", "sandbox agent vanished",
			[]tools.Effect{tools.EffectExec, tools.EffectFileWrite, tools.EffectHTTP}},
		{"Run returns error", call("oops", `{}`), job.StateFailed, job.ReasonToolError, "", "division by zero", nil},
		{"panic", call("panic", `{}`), job.StateFailed, job.ReasonInternal, "", "panicked", nil},
		{"workspace", call("write", `{}`), job.StateSucceeded, "", "", "", []tools.Effect{tools.EffectFileWrite}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := h.submit(t, "acme", tt.req)
			if q.State != job.StateQueued || q.ID == "" || q.CallID == "" || q.Tenant != "acme" {
				t.Fatalf("submitted %+v", q)
			}
			j := h.wait(t, "acme", q.ID)
			if j.State != tt.state || j.Reason != tt.reason {
				t.Fatalf("state %s/%s, want %s/%s (result %+v)", j.State, j.Reason, tt.state, tt.reason, j.Result)
			}
			if j.Result == nil {
				t.Fatal("terminal job without Result")
			}
			if j.Result.OK != (tt.state == job.StateSucceeded) {
				t.Errorf("Result.OK = %v in state %s", j.Result.OK, j.State)
			}
			if !strings.Contains(j.Result.Content, tt.content) || !strings.Contains(j.Result.Error, tt.errText) {
				t.Errorf("Result content %q error %q, want %q and %q", j.Result.Content, j.Result.Error, tt.content, tt.errText)
			}
			if !slices.Equal(j.Result.Effects, tt.effects) {
				t.Errorf("Effects = %v, want %v", j.Result.Effects, tt.effects)
			}
			if j.Attempts != 1 || j.StartedAt == nil || j.FinishedAt == nil || j.FinishedAt.Before(*j.StartedAt) {
				t.Errorf("attempts %d started %v finished %v", j.Attempts, j.StartedAt, j.FinishedAt)
			}
			stored, err := h.st.Get(t.Context(), q.ID)
			if err != nil || stored.State != j.State || stored.Result == nil {
				t.Errorf("store has %+v (%v), want state %s with a result", stored, err, j.State)
			}
			if tt.name == "workspace" {
				if _, err := os.Stat(j.Result.Content); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("workspace %s not removed: %v", j.Result.Content, err)
				}
			}
		})
	}
}

func TestSandboxSpec(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Limits.Defaults = runner.Limits{MemoryBytes: 128 << 20, Timeout: time.Minute}
		c.Limits.Ceilings = runner.Limits{MemoryBytes: 512 << 20, PIDs: 64}
	})
	// What neither the request nor the configuration sets takes the
	// built-in defaults.
	b := config.BuiltinDefaults
	builtin := func(l runner.Limits) runner.Limits {
		l.CPUMillis, l.OutputBytes, l.NoFile, l.FileSize = b.CPUMillis, b.OutputBytes, b.NoFile, b.FileSize
		l.DiskBytes, l.DiskInodes = b.DiskBytes, b.DiskInodes
		return l
	}
	tests := []struct {
		req     job.SubmitRequest
		ws      runner.WorkspaceMode
		network runner.NetworkMode
		limits  runner.Limits
	}{
		{call("echo", `{"text":"x"}`), runner.WorkspaceNone, runner.NetworkNone,
			builtin(runner.Limits{MemoryBytes: 128 << 20, PIDs: 64, Timeout: time.Minute})},
		{call("reader", `{}`), runner.WorkspaceReadOnly, runner.NetworkNone,
			builtin(runner.Limits{MemoryBytes: 128 << 20, PIDs: 64, Timeout: time.Minute})},
		{job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: []byte(`{"cmd":"echo"}`)}, Limits: runner.Limits{MemoryBytes: 256 << 20, PIDs: 8}},
			runner.WorkspaceReadWrite, runner.NetworkEgress, builtin(runner.Limits{MemoryBytes: 256 << 20, PIDs: 8, Timeout: time.Minute})},
	}
	for _, tt := range tests {
		j := h.wait(t, "acme", h.submit(t, "acme", tt.req).ID)
		if j.State != job.StateSucceeded || j.Runner != "fake" {
			t.Fatalf("%s: %s on %q, want succeeded on fake", tt.req.Call.Name, j.State, j.Runner)
		}
		spec, ok := h.r.spec(j.ID)
		if !ok {
			t.Fatalf("%s: no sandbox created", tt.req.Call.Name)
		}
		if iso := spec.Isolation; iso == nil || iso.Seccomp == nil {
			t.Fatalf("%s: spec without a compiled isolation: %+v", tt.req.Call.Name, spec)
		}
		// A sandbox that does not see a workspace gets none.
		if spec.Isolation.Workspace != tt.ws || spec.Isolation.Network != tt.network || spec.Limits != tt.limits ||
			spec.Labels["job"] != j.ID || spec.Labels["tenant"] != "acme" || (spec.Workspace == "") != (tt.ws == runner.WorkspaceNone) {
			t.Errorf("%s: spec %+v, want workspace %s network %s limits %+v", tt.req.Call.Name, spec, tt.ws, tt.network, tt.limits)
		}
		if j.Limits != tt.limits {
			t.Errorf("%s: job limits %+v, want %+v", tt.req.Call.Name, j.Limits, tt.limits)
		}
		if spec.Workspace == "" {
			continue
		}
		// The sandbox and its workspace are released after the job ends.
		eventually(t, "workspace "+spec.Workspace+" removed", func() bool {
			_, err := os.Stat(spec.Workspace)
			return errors.Is(err, os.ErrNotExist)
		})
	}
	eventually(t, "sandboxes closed", func() bool { return h.r.aliveCount() == 0 })
	if n := h.r.aliveCount(); n != 0 {
		t.Errorf("%d sandboxes alive after the jobs", n)
	}

	_, _, err := h.svc.Submit(t.Context(), "acme", job.SubmitRequest{Call: tools.Call{Name: "echo", Arguments: []byte(`{"text":"x"}`)},
		Limits: runner.Limits{MemoryBytes: 1 << 30}})
	if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "memory_bytes") || !strings.Contains(err.Error(), "536870912") {
		t.Errorf("limit above ceiling: %v, want ErrInvalid naming memory_bytes and the ceiling", err)
	}
}

func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var verr *tools.ValidationError
	tests := []struct {
		name  string
		req   job.SubmitRequest
		check func(error) bool
	}{
		{"unknown tool", call("nope", `{}`), func(err error) bool { return errors.Is(err, tools.ErrUnknownTool) }},
		{"bad args", call("echo", `{"text":3}`), func(err error) bool { return errors.As(err, &verr) }},
		{"declaration only", call("declared", `{}`), func(err error) bool { return errors.Is(err, job.ErrInvalid) }},
		{"negative limit", job.SubmitRequest{Call: tools.Call{Name: "add", Arguments: []byte(`{"a":1,"b":1}`)}, Limits: runner.Limits{PIDs: -1}},
			func(err error) bool { return errors.Is(err, job.ErrInvalid) }},
	}
	for _, tt := range tests {
		if _, _, err := h.svc.Submit(t.Context(), "acme", tt.req); !tt.check(err) {
			t.Errorf("%s: unexpected error %v", tt.name, err)
		}
	}
	if jobs, _, _ := h.svc.List(t.Context(), "acme", job.ListFilter{}); len(jobs) != 0 {
		t.Errorf("rejected submissions wrote %d jobs", len(jobs))
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted, func(c *job.Config, _ *harness) { c.Queue.Size = 2 })
	ctx := t.Context()
	reqA := call("add", `{"a":1,"b":1}`)
	reqA.IdempotencyKey = "ka"
	a := h.submit(t, "acme", reqA)
	b := h.submit(t, "acme", call("add", `{"a":1,"b":2}`))
	_, _, err := h.svc.Submit(ctx, "acme", call("add", `{"a":1,"b":3}`))
	if !errors.Is(err, job.ErrQueueFull) {
		t.Fatalf("third submit: %v, want ErrQueueFull", err)
	}
	// An idempotent replay of an accepted job still works on a full queue.
	if j, created, err := h.svc.Submit(ctx, "acme", reqA); err != nil || created || j.ID != a.ID {
		t.Fatalf("replay on a full queue: %v created=%v", err, created)
	}
	if jobs, _, err := h.svc.List(ctx, "acme", job.ListFilter{}); err != nil || len(jobs) != 2 {
		t.Fatalf("store has %d jobs (%v), want 2: a rejected job must not be written", len(jobs), err)
	}
	if ra := h.svc.QueueRetryAfter(); ra < 1 {
		t.Errorf("QueueRetryAfter = %d, want >= 1", ra)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range []*job.Job{a, b} {
		if got := h.wait(t, "acme", j.ID); got.State != job.StateSucceeded {
			t.Errorf("job %s: %s", j.ID, got.State)
		}
	}
	if _, _, err := h.svc.Submit(ctx, "acme", call("add", `{"a":1,"b":3}`)); err != nil {
		t.Errorf("submit after the queue drained: %v", err)
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted)
	ctx := t.Context()
	req := call("add", `{"a":1,"b":1}`)
	req.IdempotencyKey = "k1"
	first := h.submit(t, "acme", req)
	again, created, err := h.svc.Submit(ctx, "acme", req)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("replay: %v created=%v id %s, want %s created=false", err, created, again.ID, first.ID)
	}
	other := h.submit(t, "globex", req) // keys are per tenant
	if other.ID == first.ID {
		t.Fatal("another tenant's key returned acme's job")
	}

	req.IdempotencyKey = "race"
	var wg sync.WaitGroup
	ids := make([]string, 50)
	createdN := make([]bool, 50)
	for i := range 50 {
		wg.Go(func() {
			j, c, err := h.svc.Submit(ctx, "acme", req)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i], createdN[i] = j.ID, c
		})
	}
	wg.Wait()
	n := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("concurrent submits returned %s and %s", ids[0], ids[i])
		}
		if createdN[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d submits report created, want 1", n)
	}
	jobs, _, err := h.svc.List(ctx, "acme", job.ListFilter{})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("acme has %d jobs (%v), want 2", len(jobs), err)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if j := h.wait(t, "acme", ids[0]); j.State != job.StateSucceeded {
		t.Fatalf("raced job: %s", j.State)
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := t.Context()
	j := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
	h.wait(t, "acme", j.ID)
	if _, err := h.svc.Get(ctx, "globex", j.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if _, err := h.svc.Wait(ctx, "globex", j.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Wait: %v", err)
	}
	if _, err := h.svc.Cancel(ctx, "globex", j.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Cancel: %v", err)
	}
	if _, err := h.svc.Subscribe(ctx, "globex", j.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Subscribe: %v", err)
	}
	if jobs, _, err := h.svc.List(ctx, "globex", job.ListFilter{}); err != nil || len(jobs) != 0 {
		t.Errorf("List: %d jobs, %v", len(jobs), err)
	}
	if _, err := h.svc.Get(ctx, "acme", "job_missing"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Get missing: %v", err)
	}
	if _, _, err := h.svc.List(ctx, "acme", job.ListFilter{State: "bogus"}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("List bad state: %v", err)
	}
}

func TestCancelQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted)
	ctx := t.Context()
	q := h.submit(t, "acme", call("echo", `{"text":"never"}`))
	j, err := h.svc.Cancel(ctx, "acme", q.ID)
	if err != nil || j.State != job.StateCancelled || j.Reason != job.ReasonCancelled || j.Result == nil {
		t.Fatalf("Cancel: %+v, %v", j, err)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A later job on the same worker pool runs; the cancelled one never did.
	h.wait(t, "acme", h.submit(t, "acme", call("add", `{"a":1,"b":1}`)).ID)
	if _, ok := h.r.spec(q.ID); ok {
		t.Error("a cancelled queued job created a sandbox")
	}
	if j := h.wait(t, "acme", q.ID); j.State != job.StateCancelled || j.StartedAt != nil {
		t.Errorf("after start: %s started %v", j.State, j.StartedAt)
	}
	again, err := h.svc.Cancel(ctx, "acme", q.ID) // terminal: unchanged
	if err != nil || again.State != job.StateCancelled || !again.FinishedAt.Equal(*j.FinishedAt) {
		t.Errorf("cancel again: %+v, %v", again, err)
	}
}

func TestCancelRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, req := range []job.SubmitRequest{call("sh", `{"cmd":"block"}`), call("wait", `{}`)} {
		t.Run(req.Call.Name, func(t *testing.T) {
			q := h.submit(t, "acme", req)
			h.waitRunning(t, "acme", q.ID)
			j, err := h.svc.Cancel(t.Context(), "acme", q.ID)
			if err != nil || j.State != job.StateCancelled || j.Reason != job.ReasonCancelled {
				t.Fatalf("Cancel: %s/%s, %v", j.State, j.Reason, err)
			}
			if j.Result == nil || j.Result.OK {
				t.Errorf("cancelled result %+v", j.Result)
			}
		})
	}
	if n := h.r.aliveCount(); n != 0 {
		t.Errorf("%d sandboxes alive after cancel", n)
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) { c.Queue.Workers = 1 })
	ctx := t.Context()
	running := h.submit(t, "acme", call("sh", `{"cmd":"block"}`))
	h.waitRunning(t, "acme", running.ID)
	queued := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))

	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := h.svc.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded (jobs were cut off)", err)
	}
	if _, _, err := h.svc.Submit(ctx, "acme", call("add", `{"a":1,"b":1}`)); !errors.Is(err, job.ErrShutdown) {
		t.Errorf("Submit after Shutdown: %v", err)
	}
	j, err := h.st.Get(ctx, running.ID)
	if err != nil || j.State != job.StateFailed || j.Reason != job.ReasonShutdown {
		t.Errorf("running job after shutdown: %+v, %v", j, err)
	}
	j, err = h.st.Get(ctx, queued.ID)
	if err != nil || j.State != job.StateQueued {
		t.Errorf("queued job after shutdown: %+v, %v (want still queued)", j, err)
	}
	if n := h.r.aliveCount(); n != 0 {
		t.Errorf("%d sandboxes alive after shutdown", n)
	}
}

func TestShutdownGraceful(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := h.submit(t, "acme", call("wait", `{}`))
	h.waitRunning(t, "acme", q.ID)
	go func() { time.Sleep(20 * time.Millisecond); close(h.gate) }()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := h.svc.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if j, _ := h.st.Get(t.Context(), q.ID); j.State != job.StateSucceeded {
		t.Errorf("job finished during the grace period: %s, want succeeded", j.State)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := &nopStore{}
	reg := tools.NewRegistry()
	bad := []job.Config{
		{Queue: config.Queue{Workers: -1}},
		{Queue: config.Queue{Size: -1}},
		{Limits: config.Limits{Defaults: runner.Limits{PIDs: 100}, Ceilings: runner.Limits{PIDs: 10}}},
		{Limits: config.Limits{Defaults: runner.Limits{MemoryBytes: -1}}},
	}
	for i, cfg := range bad {
		cfg.WorkDir = t.TempDir()
		if _, err := job.New(cfg, st, reg, nil); err == nil {
			t.Errorf("config %d (%+v) accepted", i, cfg)
		}
	}
	if _, err := job.New(job.Config{WorkDir: t.TempDir()}, nil, reg, nil); err == nil {
		t.Error("nil store accepted")
	}
}

// nopStore satisfies job.Store for constructor tests.
type nopStore struct{ job.Store }

// A tool's own timeout argument (timeout_seconds; the fake sh's timeout_ms)
// follows the limits rule: any value up to the ceiling, even above the
// default (it was clipped to the default), the default when absent, and
// above the ceiling a refusal naming the ceiling. limits.timeout alike.
func TestTimeoutRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Limits.Defaults.Timeout = 100 * time.Millisecond
		c.Limits.Ceilings.Timeout = 2 * time.Second
	})
	sleep := func(extra string) job.SubmitRequest {
		return call("sh", `{"cmd":"sleep","arg":"400ms"`+extra+`}`)
	}
	// Above the default, below the ceiling: it runs to the end.
	j := h.wait(t, "acme", h.submit(t, "acme", sleep(`,"timeout_ms":1000`)).ID)
	if j.State != job.StateSucceeded || j.Limits.Timeout != time.Second {
		t.Errorf("timeout 1s (default 100ms): %s %s, limits.timeout %s", j.State, j.Reason, j.Limits.Timeout)
	}
	// Asked for nothing: the default applies.
	j = h.wait(t, "acme", h.submit(t, "acme", sleep("")).ID)
	if j.State != job.StateFailed || j.Reason != job.ReasonTimeout || j.Limits.Timeout != 100*time.Millisecond {
		t.Errorf("no timeout asked: %s %s, limits.timeout %s", j.State, j.Reason, j.Limits.Timeout)
	}
	// limits.timeout above the default: accepted too; with both, the smaller wins.
	req := sleep("")
	req.Limits.Timeout = 1500 * time.Millisecond
	if j = h.wait(t, "acme", h.submit(t, "acme", req).ID); j.State != job.StateSucceeded || j.Limits.Timeout != 1500*time.Millisecond {
		t.Errorf("limits.timeout 1.5s: %s %s, limits.timeout %s", j.State, j.Reason, j.Limits.Timeout)
	}
	req = sleep(`,"timeout_ms":200`)
	req.Limits.Timeout = 1500 * time.Millisecond
	if j = h.wait(t, "acme", h.submit(t, "acme", req).ID); j.State != job.StateFailed || j.Limits.Timeout != 200*time.Millisecond {
		t.Errorf("timeout_ms 200 and limits.timeout 1.5s: %s %s, limits.timeout %s", j.State, j.Reason, j.Limits.Timeout)
	}
	// Above the ceiling: refused before anything is recorded, naming it.
	for name, req := range map[string]job.SubmitRequest{
		"tool timeout":   sleep(`,"timeout_ms":3000`),
		"limits.timeout": {Call: sleep("").Call, Limits: runner.Limits{Timeout: 3 * time.Second}},
	} {
		_, _, err := h.svc.Submit(t.Context(), "acme", req)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "exceeds the ceiling") || !strings.Contains(err.Error(), "2s") {
			t.Errorf("%s above the ceiling: %v", name, err)
		}
	}
}

// TestIdempotencyKeyReused: a key names one request. The same call after
// parsing and repair (key order, spacing, a repaired dict, an alias)
// returns the key's job; another tool, other arguments, another session
// or other limits are ErrIdempotencyKeyReused naming the key, and write
// nothing.
func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, notStarted)
	ctx := t.Context()
	req := call("add", `{"a":1,"b":2}`)
	req.IdempotencyKey = "pay-1"
	first := h.submit(t, "acme", req)
	for _, args := range []string{`{"b":2,"a":1}`, ` { "a" : 1 , "b" : 2 } `, `{'a': 1, 'b': 2,}`, `"{\"a\":1,\"b\":2}"`} {
		r := call("add", args)
		r.IdempotencyKey = "pay-1"
		if j, created, err := h.svc.Submit(ctx, "acme", r); err != nil || created || j.ID != first.ID {
			t.Errorf("same request as %s: %v created=%v", args, err, created)
		}
	}
	session := call("add", `{"a":1,"b":2}`)
	session.SessionID = "ses_other"
	limits := call("add", `{"a":1,"b":2}`)
	limits.Limits.MemoryBytes = 64 << 20
	for name, r := range map[string]job.SubmitRequest{
		"arguments": call("add", `{"a":1,"b":3}`),
		"tool":      call("oops", `{}`),
		"session":   session,
		"limits":    limits,
	} {
		r.IdempotencyKey = "pay-1"
		_, _, err := h.svc.Submit(ctx, "acme", r)
		if !errors.Is(err, job.ErrIdempotencyKeyReused) || !strings.Contains(err.Error(), `"pay-1"`) || !strings.Contains(err.Error(), first.ID) {
			t.Errorf("other %s: %v", name, err)
		}
	}
	if jobs, _, _ := h.svc.List(ctx, "acme", job.ListFilter{}); len(jobs) != 1 {
		t.Errorf("%d jobs, want 1", len(jobs))
	}
}
