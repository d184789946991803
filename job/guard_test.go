package job_test

import (
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
)

// withPolicy gives tenant a policy parsed from YAML and the guard.
func withPolicy(t testing.TB, tenant, yml string) option {
	t.Helper()
	p, err := policy.ParseTenantPolicy([]byte(yml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return func(c *job.Config, h *harness) {
		if c.Policies == nil {
			c.Policies = map[string]policy.TenantPolicy{}
		}
		c.Policies[tenant] = p
		g, err := policy.NewGuard(c.Policies, policy.GuardOptions{})
		if err != nil {
			t.Fatalf("NewGuard: %v", err)
		}
		c.Guard = g
		c.ApprovalSweep = 5 * time.Millisecond
		c.WebhookBackoff = 5 * time.Millisecond
	}
}

func TestGuardDenyIsAToolResult(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: add
    action: deny
    reason: arithmetic is not allowed here
`))
		j := h.submit(t, "acme", call("add", `{"a":1,"b":2}`))
		if j.State != job.StateFailed || j.Reason != job.ReasonDenied {
			t.Fatalf("state %s/%s, want failed/denied", j.State, j.Reason)
		}
		if j.Result == nil || j.Result.OK || !strings.Contains(j.Result.Error, "arithmetic is not allowed here") {
			t.Fatalf("result %+v: want ok=false with the rule's reason", j.Result)
		}
		if j.Guard == nil || j.Guard.Outcome != policy.OutcomeDeny || j.Guard.Rule != "rules[0]" {
			t.Fatalf("guard record %+v", j.Guard)
		}
		got, err := h.svc.Get(t.Context(), "acme", j.ID) // recorded, not only returned
		if err != nil || got.Guard == nil || got.Reason != job.ReasonDenied {
			t.Fatalf("stored job %+v, %v", got, err)
		}
		// Another tenant without a policy is not affected.
		if j := h.wait(t, "other", h.submit(t, "other", call("add", `{"a":1,"b":2}`)).ID); j.State != job.StateSucceeded || j.Guard != nil {
			t.Fatalf("tenant without policy: %s guard %+v", j.State, j.Guard)
		}
	})
}

// 200 calls race for the last 10 units of a budget: exactly 10 run.
func TestGuardBudgetRacers(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
budgets:
  - effect: exec
    limit: 10
    per: 1h
    scope: tenant
`))
		var (
			wg                 sync.WaitGroup
			mu                 sync.Mutex
			allowed, exhausted int
		)
		for range 200 {
			wg.Go(func() {
				j, _, err := h.svc.Submit(t.Context(), "acme", call("echo", `{"text":"x"}`))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case j.Reason == job.ReasonBudgetExhausted:
					exhausted++
					if !strings.Contains(j.Result.Error, "budget") {
						t.Errorf("exhausted result %q does not say budget", j.Result.Error)
					}
				case j.State == job.StateQueued || j.State == job.StateRunning || j.State == job.StateSucceeded:
					allowed++
				default:
					t.Errorf("unexpected job %s/%s", j.State, j.Reason)
				}
			})
		}
		wg.Wait()
		if allowed != 10 || exhausted != 190 {
			t.Fatalf("allowed %d, exhausted %d; want exactly 10 and 190", allowed, exhausted)
		}
	})
}

func TestApprovalApprove(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: add
    action: confirm
    reason: a human checks sums
`))
		j := h.submit(t, "acme", call("add", `{"a":2,"b":3}`))
		if j.State != job.StatePendingApproval {
			t.Fatalf("state %s, want pending_approval", j.State)
		}
		list, _, err := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{State: job.ApprovalPending})
		if err != nil || len(list) != 1 || list[0].JobID != j.ID || list[0].Reason != "a human checks sums" {
			t.Fatalf("pending approvals %+v, %v", list, err)
		}
		// The job names the approval it waits for, also as stored.
		if j.Guard == nil || j.Guard.ApprovalID != list[0].ID {
			t.Fatalf("job's guard %+v, want approval %s", j.Guard, list[0].ID)
		}
		if got, _ := h.svc.Get(t.Context(), "acme", j.ID); got.Guard == nil || got.Guard.ApprovalID != list[0].ID {
			t.Fatalf("stored job's guard %+v", got.Guard)
		}
		if _, _, err := h.svc.ListApprovals(t.Context(), "other", job.ApprovalFilter{}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.svc.DecideApproval(t.Context(), "other", list[0].ID, job.ApprovalDecision{Approve: true}); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("another tenant approving: %v, want ErrNotFound", err)
		}
		a, err := h.svc.DecideApproval(t.Context(), "acme", list[0].ID, job.ApprovalDecision{Approve: true, Reason: "fine"})
		if err != nil || a.State != job.ApprovalApproved {
			t.Fatalf("approve: %+v, %v", a, err)
		}
		if done := h.wait(t, "acme", j.ID); done.State != job.StateSucceeded || done.Result.Content != "5" {
			t.Fatalf("approved job %s/%s %+v", done.State, done.Reason, done.Result)
		}
		if _, err := h.svc.DecideApproval(t.Context(), "acme", list[0].ID, job.ApprovalDecision{}); !errors.Is(err, job.ErrConflict) {
			t.Fatalf("second decision: %v, want ErrConflict", err)
		}
	})
}

func TestApprovalDenyRefundsBudget(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: echo
    action: confirm
budgets:
  - effect: exec
    limit: 1
    per: 1h
`))
		j := h.submit(t, "acme", call("echo", `{"text":"a"}`))
		if j.State != job.StatePendingApproval {
			t.Fatalf("state %s", j.State)
		}
		// The pending call holds the only unit.
		if k := h.submit(t, "acme", call("echo", `{"text":"b"}`)); k.Reason != job.ReasonBudgetExhausted {
			t.Fatalf("second call while the first is pending: %s/%s", k.State, k.Reason)
		}
		list, _, _ := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{State: job.ApprovalPending})
		if len(list) != 1 {
			t.Fatalf("pending %d", len(list))
		}
		if _, err := h.svc.DecideApproval(t.Context(), "acme", list[0].ID, job.ApprovalDecision{Reason: "not today"}); err != nil {
			t.Fatal(err)
		}
		done := h.wait(t, "acme", j.ID)
		if done.State != job.StateFailed || done.Reason != job.ReasonApprovalDenied || !strings.Contains(done.Result.Error, "not today") {
			t.Fatalf("denied job %s/%s %+v", done.State, done.Reason, done.Result)
		}
		if !done.Guard.Refunded {
			t.Fatal("denied job's units were not refunded")
		}
		if k := h.submit(t, "acme", call("echo", `{"text":"c"}`)); k.State != job.StatePendingApproval {
			t.Fatalf("after the refund: %s/%s, want pending_approval", k.State, k.Reason)
		}
	})
}

func TestApprovalExpires(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rules:
  - tool: add
    action: confirm
approvals:
  timeout: 50ms
`))
		j := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
		done := h.wait(t, "acme", j.ID)
		if done.State != job.StateFailed || done.Reason != job.ReasonApprovalExpired {
			t.Fatalf("job %s/%s, want failed/approval_expired", done.State, done.Reason)
		}
		list, _, _ := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{})
		if len(list) != 1 || list[0].State != job.ApprovalExpired {
			t.Fatalf("approvals %+v", list)
		}
		if _, err := h.svc.DecideApproval(t.Context(), "acme", list[0].ID, job.ApprovalDecision{Approve: true}); !errors.Is(err, job.ErrConflict) {
			t.Fatalf("approving an expired approval: %v", err)
		}
	})
}

func TestApprovalCancel(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", "rules: [{tool: add, action: confirm}]"))
		j := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
		c, err := h.svc.Cancel(t.Context(), "acme", j.ID)
		if err != nil || c.State != job.StateCancelled {
			t.Fatalf("cancel: %+v %v", c, err)
		}
		list, _, _ := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{})
		if len(list) != 1 || list[0].State != job.ApprovalDenied {
			t.Fatalf("approval of a cancelled job: %+v", list)
		}
	})
}

func TestApprovalWebhookSigned(t *testing.T) {
	type delivery struct {
		hdr  http.Header
		body []byte
	}
	got := make(chan delivery, 4)
	fails := 1 // the first attempt fails: the retry must come
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		got <- delivery{r.Header.Clone(), b}
	}))
	defer srv.Close()
	h := newHarness(t, withPolicy(t, "acme", `
rules: [{tool: add, action: confirm}]
approvals:
  webhook:
    url: `+srv.URL+`
    secret: s3cret
`))
	j := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
	var d delivery
	select {
	case d = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook delivery")
	}
	ts := d.hdr.Get("X-Sandboxd-Timestamp")
	want := job.WebhookSignature([]byte("s3cret"), ts, d.body)
	if !hmac.Equal([]byte(d.hdr.Get("X-Sandboxd-Signature")), []byte(want)) {
		t.Fatalf("signature %q, want %q", d.hdr.Get("X-Sandboxd-Signature"), want)
	}
	if job.WebhookSignature([]byte("wrong"), ts, d.body) == want {
		t.Fatal("signature does not depend on the secret")
	}
	var msg struct {
		Type     string       `json:"type"`
		Approval job.Approval `json:"approval"`
	}
	if err := json.Unmarshal(d.body, &msg); err != nil || msg.Type != "approval.created" || msg.Approval.JobID != j.ID {
		t.Fatalf("webhook body %s (%v)", d.body, err)
	}
}

// Budgets live in the store: a restart does not hand out spent units again.
func TestGuardBudgetSurvivesRestart(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		const yml = `
budgets:
  - effect: exec
    limit: 3
    per: 24h
`
		dir := t.TempDir()
		for round, want := range [][]string{{"", "", ""}, {job.ReasonBudgetExhausted}} {
			h := newHarness(t, store(), withPolicy(t, "acme", yml), inDir(dir))
			for i, w := range want {
				j := h.submit(t, "acme", call("echo", `{"text":"x"}`))
				j = h.wait(t, "acme", j.ID)
				if j.Reason != w {
					t.Fatalf("round %d call %d: reason %q, want %q", round, i, j.Reason, w)
				}
			}
			h.close(t)
		}
	})
}

// The operator (job.AllTenants) lists every tenant's approvals and decides
// any of them; a tenant still sees only its own.
func TestApprovalOperatorAllTenants(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		const confirm = "rules: [{tool: add, action: confirm}]"
		h := newHarness(t, store(), withPolicy(t, "acme", confirm), withPolicy(t, "globex", confirm))
		ja := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
		jg := h.submit(t, "globex", call("add", `{"a":2,"b":2}`))
		all, _, err := h.svc.ListApprovals(t.Context(), job.AllTenants, job.ApprovalFilter{State: job.ApprovalPending})
		if err != nil || len(all) != 2 {
			t.Fatalf("operator's pending approvals %+v, %v", all, err)
		}
		own, _, err := h.svc.ListApprovals(t.Context(), "acme", job.ApprovalFilter{})
		if err != nil || len(own) != 1 || own[0].JobID != ja.ID {
			t.Fatalf("acme's approvals %+v, %v", own, err)
		}
		var globexApproval string
		for _, a := range all {
			if a.JobID == jg.ID {
				globexApproval = a.ID
			}
		}
		if _, err := h.svc.DecideApproval(t.Context(), "acme", globexApproval, job.ApprovalDecision{Approve: true}); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("acme deciding globex's approval: %v, want ErrNotFound", err)
		}
		if a, err := h.svc.GetApproval(t.Context(), job.AllTenants, globexApproval); err != nil || a.Tenant != "globex" {
			t.Fatalf("operator get: %+v %v", a, err)
		}
		if a, err := h.svc.DecideApproval(t.Context(), job.AllTenants, globexApproval, job.ApprovalDecision{Approve: true}); err != nil || a.State != job.ApprovalApproved {
			t.Fatalf("operator approve: %+v %v", a, err)
		}
		if done := h.wait(t, "globex", jg.ID); done.State != job.StateSucceeded || done.Result.Content != "4" {
			t.Fatalf("approved by the operator: %s/%s %+v", done.State, done.Reason, done.Result)
		}
	})
}

// TestRateLimitedRetryAt: a call the rate limit refuses carries when a
// retry may pass, machine-readable, on the job record (stored too).
func TestRateLimitedRetryAt(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
rate_limit:
  rate: 0.5
  burst: 1
`))
		first := h.submit(t, "acme", call("add", `{"a":1,"b":1}`))
		if first.Guard == nil || first.Guard.RetryAt != nil {
			t.Fatalf("allowed call's guard %+v", first.Guard)
		}
		j := h.submit(t, "acme", call("add", `{"a":1,"b":2}`))
		if j.State != job.StateFailed || j.Reason != job.ReasonRateLimited || j.Guard == nil || j.Guard.RetryAt == nil {
			t.Fatalf("refused call: %s/%s guard %+v", j.State, j.Reason, j.Guard)
		}
		if d := j.Guard.RetryAt.Sub(j.Guard.DecidedAt); d <= 0 || d > 2*time.Second {
			t.Fatalf("retry at %v after the decision, want within the 2 s a token takes", d)
		}
		if got, _ := h.svc.Get(t.Context(), "acme", j.ID); got.Guard == nil || got.Guard.RetryAt == nil || !got.Guard.RetryAt.Equal(*j.Guard.RetryAt) {
			t.Fatalf("stored guard %+v", got.Guard)
		}
	})
}

// What remains after each allowed call is on the job, as returned and as
// stored, the same on both stores: three budgets on one effect, two of
// them on one counter (same window); a refused call reports what stands.
func TestGuardRemaining(t *testing.T) {
	bothStores(t, func(t *testing.T, store func() option) {
		h := newHarness(t, store(), withPolicy(t, "acme", `
budgets:
  - effect: exec
    limit: 3
    per: 1h
  - effect: exec
    limit: 5
    per: 24h
  - effect: exec
    limit: 4
    per: 1h
`))
		check := func(what string, j *job.Job, want []int64) {
			t.Helper()
			var got []int64
			if j.Guard != nil {
				for _, r := range j.Guard.Remaining {
					got = append(got, r.Remaining)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: %s/%s remaining %v, want %v", what, j.State, j.Reason, got, want)
			}
		}
		for i, w := range [][]int64{{2, 4, 3}, {1, 3, 2}, {0, 2, 1}} {
			j := h.submit(t, "acme", call("echo", `{"text":"x"}`))
			check(fmt.Sprintf("call %d", i), j, w)
			if j = h.wait(t, "acme", j.ID); j.State != job.StateSucceeded {
				t.Fatalf("call %d: %s/%s", i, j.State, j.Reason)
			}
			check(fmt.Sprintf("call %d, finished", i), j, w)
			stored, err := h.st.Get(t.Context(), j.ID)
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("call %d, stored", i), stored, w)
		}
		j := h.submit(t, "acme", call("echo", `{"text":"x"}`))
		if j.Reason != job.ReasonBudgetExhausted {
			t.Fatalf("fourth call: %s/%s", j.State, j.Reason)
		}
		check("fourth call", j, []int64{0, 2, 1})
	})
}
