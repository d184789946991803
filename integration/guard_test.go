//go:build integration

package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// guardJob is the part of a job the guard tests read.
type guardJob struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Result *struct {
		OK      bool   `json:"ok"`
		Content string `json:"content"`
		Error   string `json:"error"`
	} `json:"result"`
	Guard *struct {
		Outcome   string `json:"outcome"`
		Code      string `json:"code"`
		Rule      string `json:"rule"`
		Remaining []struct {
			Rule      string `json:"rule"`
			Remaining int64  `json:"remaining"`
		} `json:"remaining"`
	} `json:"guard"`
}

const guardConfig = `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      rules:
        - tool: calculator
          action: deny
          reason: use python_repl for arithmetic
        - tool: bash
          action: confirm
          reason: shell commands need a human
      budgets:
        - effect: exec
          limit: 3
          per: 1h
  - name: free
    api_keys: [k-free]
`

// The guard end to end through the HTTP API: a deny rule, an effect budget
// spent to zero, a confirm rule approved through /v1/approvals, the
// decisions in /metrics, and the budget still spent after a restart.
func TestGuardThroughAPI(t *testing.T) {
	s := startServer(t, guardConfig)
	submit := func(key, tool string, args any, wait bool) guardJob {
		t.Helper()
		path := "/v1/jobs"
		if wait {
			path += "?wait=true"
		}
		var j guardJob
		resp, data := s.do("POST", path, key, map[string]any{"tool": tool, "arguments": args}, &j)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: status %d: %s", tool, resp.StatusCode, data)
		}
		return j
	}

	// deny: a tool result the model can read, not a transport error.
	j := submit("k-acme", "calculator", map[string]any{"expression": "1+1"}, true)
	if j.State != "failed" || j.Reason != "denied" || j.Result == nil || j.Result.OK ||
		!strings.Contains(j.Result.Error, "use python_repl for arithmetic") || j.Guard == nil || j.Guard.Rule != "rules[0]" {
		t.Fatalf("denied call: %+v guard %+v result %+v", j, j.Guard, j.Result)
	}
	// A tenant without a policy is not affected.
	if j := submit("k-free", "calculator", map[string]any{"expression": "1+1"}, true); j.State != "succeeded" || j.Guard != nil {
		t.Fatalf("tenant without a policy: %+v", j)
	}

	// Budget: exec 3 per hour; two python calls, then bash held for approval
	// (it reserves the third unit).
	for i := range 2 {
		j := submit("k-acme", "python_repl", map[string]any{"code": "print(6*7)"}, true)
		if j.State != "succeeded" || j.Guard == nil || len(j.Guard.Remaining) != 1 || j.Guard.Remaining[0].Remaining != int64(2-i) {
			t.Fatalf("python call %d: %+v guard %+v", i, j, j.Guard)
		}
	}
	pending := submit("k-acme", "bash", map[string]any{"command": "echo approved-run"}, false)
	if pending.State != "pending_approval" {
		t.Fatalf("bash: state %s, want pending_approval", pending.State)
	}
	if j := submit("k-acme", "python_repl", map[string]any{"code": "1"}, true); j.Reason != "budget_exhausted" ||
		j.Result.OK || !strings.Contains(j.Result.Error, "budget") {
		t.Fatalf("fourth exec call: %+v result %+v", j, j.Result)
	}

	var page struct {
		Approvals []map[string]any `json:"approvals"`
	}
	resp, data := s.do("GET", "/v1/approvals?state=pending", "k-acme", nil, &page)
	if resp.StatusCode != 200 || len(page.Approvals) != 1 {
		t.Fatalf("pending approvals: %d %s", resp.StatusCode, data)
	}
	raw := page.Approvals
	id, _ := raw[0]["id"].(string)
	if raw[0]["job_id"] != pending.ID || raw[0]["tool"] != "bash" {
		t.Fatalf("approval %v does not describe job %s", raw[0], pending.ID)
	}
	// Another tenant can neither see nor decide it.
	if resp, _ := s.do("POST", "/v1/approvals/"+id, "k-free", map[string]any{"decision": "approve"}, nil); resp.StatusCode != 404 {
		t.Fatalf("other tenant deciding: %d, want 404", resp.StatusCode)
	}
	if resp, data := s.do("POST", "/v1/approvals/"+id, "k-acme", map[string]any{"decision": "maybe"}, nil); resp.StatusCode != 400 {
		t.Fatalf("bad decision: %d %s, want 400", resp.StatusCode, data)
	}
	if resp, data := s.do("POST", "/v1/approvals/"+id, "k-acme", map[string]any{"decision": "approve", "reason": "looks safe"}, nil); resp.StatusCode != 200 {
		t.Fatalf("approve: %d %s", resp.StatusCode, data)
	}
	if resp, _ := s.do("POST", "/v1/approvals/"+id, "k-acme", map[string]any{"decision": "deny"}, nil); resp.StatusCode != 409 {
		t.Fatalf("deciding twice: %d, want 409", resp.StatusCode)
	}
	var done guardJob
	s.do("GET", "/v1/jobs/"+pending.ID+"?wait=true", "k-acme", nil, &done)
	if done.State != "succeeded" || !strings.Contains(done.Result.Content, "approved-run") {
		t.Fatalf("approved job: %+v result %+v", done, done.Result)
	}

	// The decisions are metrics (the guard's own counters, exported).
	metrics := s.getMetrics()
	for _, want := range []string{
		`sandboxd_guard_decisions_total{outcome="deny",rule="rules[0]",tenant="acme"} 1`,
		`sandboxd_guard_decisions_total{outcome="confirm",rule="rules[1]",tenant="acme"} 1`,
		`sandboxd_guard_budget_remaining{effect="exec",rule="budgets[0]",scope="tenant",tenant="acme"} 0`,
		`sandboxd_approvals_pending{tenant="acme"} 0`,
		`sandboxd_jobs_total{outcome="refused",runner="local",tenant="acme",tool="python_repl"} 1`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The budget survives a restart: the store keeps the spends.
	s.stop(syscall.SIGTERM)
	s.start()
	if j := submit("k-acme", "python_repl", map[string]any{"code": "1"}, true); j.Reason != "budget_exhausted" {
		t.Fatalf("after a restart: %+v, want budget_exhausted", j)
	}
}

// A bad policy stops the daemon at start with an error naming the key.
func TestGuardBadPolicy(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{"rules: [{tool: bash, action: maybe}]", "policy.rules[0].action"},
		{"budgets: [{effect: exec, limit: 3, per: 0s}]", "policy.budgets[0].per"},
		{"budgets: [{effect: teleport, limit: 3, per: 1h}]", "policy.budgets[0].effect"},
		{"egress: {allow: [{host: 'exa mple.com'}]}", "policy.egress.allow[0].host"},
		{"rulez: []", "rulez"},
	} {
		cfg := filepath.Join(t.TempDir(), "bad.yaml")
		body := "tenants:\n  - name: acme\n    api_keys: [k]\n    policy: {" + tc.policy + "}\n"
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		addrs := freeAddrs(t, 2)
		cmd := exec.Command(binPath, "serve", "--config", cfg, "--addr", addrs[0], "--metrics-addr", addrs[1], "--data-dir", t.TempDir())
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("policy %q: sandboxd started", tc.policy)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("policy %q: error %q does not name %s", tc.policy, out, tc.want)
		}
	}
}
