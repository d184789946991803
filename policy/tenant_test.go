package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

func TestParseTenantPolicy(t *testing.T) {
	t.Parallel()
	p, err := ParseTenantPolicy([]byte(`
default: deny
rules:
  - tool: "file_*"
    action: allow
  - effect: http
    action: confirm
    reason: web access needs approval
  - tool: shell
    effect: exec
    action: deny
budgets:
  - {effect: http, limit: 100, per: 1h}
  - {effect: exec, limit: 5, per: 30s, scope: session}
tool_limits:
  - {tool: python_repl, max_calls: 20}
rate_limit: {rate: 2.5, burst: 5}
approvals:
  timeout: 10m
  webhook: {url: "https://hooks.example.com/approve", secret: s3cret}
egress:
  allow:
    - host: api.example.com
      ports: [443]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Default != ActionDeny || len(p.Rules) != 3 || p.Rules[1].Reason != "web access needs approval" {
		t.Errorf("rules: %+v", p)
	}
	if b := p.Budgets[1]; b.Per != Duration(30*time.Second) || b.Scope != ScopeSession || b.Limit != 5 {
		t.Errorf("budget: %+v", b)
	}
	if p.ToolLimits[0].MaxCalls != 20 || p.RateLimit.Rate != 2.5 || p.RateLimit.Burst != 5 {
		t.Errorf("limits: %+v %+v", p.ToolLimits, p.RateLimit)
	}
	if got := p.Approvals.TimeoutOrDefault(); got != 10*time.Minute {
		t.Errorf("approval timeout %v", got)
	}
	if got := (ApprovalConfig{}).TimeoutOrDefault(); got != DefaultApprovalTimeout {
		t.Errorf("default approval timeout %v", got)
	}
	if p.Egress.Allow[0].Host != "api.example.com" {
		t.Errorf("egress: %+v", p.Egress)
	}

	empty, err := ParseTenantPolicy(nil)
	if err != nil || empty.Default != "" || empty.Rules != nil {
		t.Errorf("empty policy: %+v, %v", empty, err)
	}
}

func TestParseTenantPolicyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown top key", "rulez: []", "field rulez not found"},
		{"unknown rule key", "rules: [{tool: x, action: allow, why: no}]", "field why not found"},
		{"unknown budget key", "budgets: [{effect: http, limit: 1, window: 1h}]", "field window not found"},
		{"bad duration", "budgets: [{effect: http, limit: 1, per: an hour}]", `invalid duration "an hour"`},
		{"duration not scalar", "budgets: [{effect: http, limit: 1, per: [1h]}]", "expected a duration"},
		{"invalid after decode", "rules: [{tool: x, action: maybe}]", `policy.rules[0].action: "maybe" is not one of allow, deny, confirm`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseTenantPolicy([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	hour := Duration(time.Hour)
	ok := func(p TenantPolicy) TenantPolicy { return p }
	for _, tc := range []struct {
		name string
		p    TenantPolicy
		want string // "" means valid
	}{
		{"zero", TenantPolicy{}, ""},
		{"full", ok(TenantPolicy{
			Default:    ActionConfirm,
			Rules:      []Rule{{Tool: "a*", Action: ActionAllow}, {Effect: "http", Action: ActionDeny}, {Tool: "x", Effect: "exec", Action: ActionConfirm}},
			Budgets:    []Budget{{Effect: "http", Limit: 1, Per: hour}, {Effect: "exec", Limit: 1, Per: hour, Scope: ScopeSession}, {Effect: "exec", Limit: 1, Per: hour, Scope: ScopeTenant}},
			ToolLimits: []ToolLimit{{Tool: "python_repl", MaxCalls: 3}, {Tool: "*", MaxCalls: 50}},
			RateLimit:  &RateLimit{Rate: 0.5},
			Approvals:  ApprovalConfig{Timeout: Duration(time.Minute), Webhook: &WebhookConfig{URL: "http://localhost:9000/x", Secret: "s"}},
		}), ""},
		{"bad default", TenantPolicy{Default: "block"}, `policy.default: "block" is not one of allow, deny, confirm`},
		{"rule bad action", TenantPolicy{Rules: []Rule{{Tool: "a", Action: "allow"}, {Tool: "b", Action: "allow"}, {Tool: "c", Action: "maybe"}}},
			`policy.rules[2].action: "maybe" is not one of allow, deny, confirm`},
		{"rule missing action", TenantPolicy{Rules: []Rule{{Tool: "a"}}}, `policy.rules[0].action: "" is not one of`},
		{"rule matches nothing", TenantPolicy{Rules: []Rule{{Action: ActionDeny}}}, "policy.rules[0]: needs a tool, an effect or both"},
		{"rule bad effect", TenantPolicy{Rules: []Rule{{Effect: "network", Action: ActionDeny}}},
			`policy.rules[0].effect: "network" is not one of file_read, file_write, exec, http`},
		{"rule bad glob", TenantPolicy{Rules: []Rule{{Tool: "[a", Action: ActionDeny}}}, `policy.rules[0].tool: "[a" is not a valid glob`},
		{"budget bad effect", TenantPolicy{Budgets: []Budget{{Effect: "gpu", Limit: 1, Per: hour}}}, `policy.budgets[0].effect: "gpu" is not one of`},
		{"budget no effect", TenantPolicy{Budgets: []Budget{{Limit: 1, Per: hour}}}, `policy.budgets[0].effect: "" is not one of`},
		{"budget negative limit", TenantPolicy{Budgets: []Budget{{Effect: "http", Limit: -1, Per: hour}}}, "policy.budgets[0].limit: -1 must be > 0"},
		{"budget zero limit", TenantPolicy{Budgets: []Budget{{Effect: "http", Per: hour}}}, "policy.budgets[0].limit: 0 must be > 0"},
		{"budget no window", TenantPolicy{Budgets: []Budget{{Effect: "http", Limit: 1}}}, "policy.budgets[0].per: must be > 0"},
		{"budget negative window", TenantPolicy{Budgets: []Budget{{Effect: "http", Limit: 1, Per: -hour}}}, "policy.budgets[0].per: must be > 0"},
		{"budget bad scope", TenantPolicy{Budgets: []Budget{{Effect: "http", Limit: 1, Per: hour, Scope: "sessions"}}},
			`policy.budgets[0].scope: "sessions" is not one of tenant, session`},
		{"tool limit no tool", TenantPolicy{ToolLimits: []ToolLimit{{MaxCalls: 1}}}, "policy.tool_limits[0].tool: required"},
		{"tool limit bad glob", TenantPolicy{ToolLimits: []ToolLimit{{Tool: "[", MaxCalls: 1}}}, `policy.tool_limits[0].tool: "[" is not a valid glob`},
		{"tool limit negative", TenantPolicy{ToolLimits: []ToolLimit{{Tool: "x", MaxCalls: -2}}}, "policy.tool_limits[0].max_calls: -2 must be > 0"},
		{"rate zero", TenantPolicy{RateLimit: &RateLimit{}}, "policy.rate_limit.rate: 0 must be"},
		{"rate negative burst", TenantPolicy{RateLimit: &RateLimit{Rate: 1, Burst: -1}}, "policy.rate_limit.burst: -1 must be >= 0"},
		{"approval negative timeout", TenantPolicy{Approvals: ApprovalConfig{Timeout: -hour}}, "policy.approvals.timeout"},
		{"webhook relative url", TenantPolicy{Approvals: ApprovalConfig{Webhook: &WebhookConfig{URL: "/hook", Secret: "s"}}},
			`policy.approvals.webhook.url: "/hook" is not an absolute http or https URL`},
		{"webhook no secret", TenantPolicy{Approvals: ApprovalConfig{Webhook: &WebhookConfig{URL: "https://h/x"}}},
			"policy.approvals.webhook.secret: required"},
		{"egress no host", TenantPolicy{Egress: EgressPolicy{Allow: []EgressRule{{Host: ""}}}}, "policy.egress.allow[0].host"},
		{"egress bad cidr", TenantPolicy{Egress: EgressPolicy{AllowPrivateCIDRs: []string{"10.0.0.0"}}}, `policy.egress.allow_private_cidrs[0]: "10.0.0.0" is not a CIDR`},
		{"egress bad port", TenantPolicy{Egress: EgressPolicy{Allow: []EgressRule{{Host: "a.example.com"}, {Host: "b.example.com", Ports: []int{0}}}}},
			"policy.egress.allow[1].ports[0]: 0 is not a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestValidateReportsEveryProblem: one line per problem, each with its path.
func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	p := TenantPolicy{
		Default: "nope",
		Rules:   []Rule{{Action: "x"}},
		Budgets: []Budget{{Effect: "http", Limit: -1}},
		Egress:  EgressPolicy{AllowPrivateCIDRs: []string{"x", "y"}},
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 7 {
		t.Fatalf("want 7 problems, got %d:\n%v", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "policy.") {
			t.Errorf("line without a key path: %q", l)
		}
	}
}

func TestDurationString(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 90 * time.Minute: "1h30m", 2 * time.Minute: "2m", 30 * time.Second: "30s",
		250 * time.Millisecond: "250ms", 24 * time.Hour: "24h", time.Hour + time.Second: "1h0m1s",
	} {
		if got := Duration(d).String(); got != want {
			t.Errorf("%v: got %q, want %q", d, got, want)
		}
	}
}

// FuzzParseTenantPolicy: no input panics, and whatever parses builds a
// guard that decides without panicking.
func FuzzParseTenantPolicy(f *testing.F) {
	f.Add([]byte("default: deny\nrules: [{tool: \"a*\", effect: http, action: confirm}]\n"))
	f.Add([]byte("budgets: [{effect: exec, limit: 3, per: 1m, scope: session}]\ntool_limits: [{tool: x, max_calls: 1}]\nrate_limit: {rate: 1}\n"))
	f.Add([]byte("egress: {allow: [{host: '*.example.com', ports: [443]}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseTenantPolicy(data)
		if err != nil {
			return
		}
		g, err := NewGuard(map[string]TenantPolicy{"t": p}, GuardOptions{})
		if err != nil {
			t.Fatalf("parsed policy rejected by NewGuard: %v", err)
		}
		for _, tool := range []string{"a", "x", "shell"} {
			d := g.Decide(Request{Tenant: "t", Session: "s", Tool: tool, Effects: tools.AllEffects})
			g.Refund(d.Spend)
		}
	})
}
