package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"path"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/tools"
)

// TenantPolicy is what one tenant's calls may do, written under the tenant
// in the config file as `policy:`. The guard (NewGuard) enforces Default,
// Rules, Budgets, ToolLimits and RateLimit; the job service reads Approvals
// and Egress. The zero value allows everything (subject to Egress, whose
// zero value allows no network).
type TenantPolicy struct {
	// Default is the action when no rule matches; "" means allow.
	Default Action `yaml:"default"`
	// Rules are tried in order; the first match decides the action.
	Rules []Rule `yaml:"rules"`
	// Budgets cap how often an effect may be spent in a fixed window.
	Budgets []Budget `yaml:"budgets"`
	// ToolLimits cap a tool's calls over a session's life.
	ToolLimits []ToolLimit `yaml:"tool_limits"`
	// RateLimit caps the tenant's calls per second (nil: no limit).
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Approvals configures calls whose action is confirm.
	Approvals ApprovalConfig `yaml:"approvals"`
	// Egress is the network allowlist of calls with the http effect.
	Egress EgressPolicy `yaml:"egress"`
}

// Action is what a rule does with a call it matches.
type Action string

// Actions. The empty Action is valid only as TenantPolicy.Default (allow).
const (
	ActionAllow   Action = "allow"
	ActionDeny    Action = "deny"
	ActionConfirm Action = "confirm"
)

func (a Action) valid() bool { return a == ActionAllow || a == ActionDeny || a == ActionConfirm }

// Rule matches calls by tool name and/or effect. With both set, both must
// match; at least one must be set.
type Rule struct {
	// Tool is a tool name or a path.Match glob ("file_*", "*").
	Tool string `yaml:"tool"`
	// Effect matches calls that spend this effect.
	Effect tools.Effect `yaml:"effect"`
	// Action is allow, deny or confirm (hold for a human's approval).
	Action Action `yaml:"action"`
	// Reason is told to the model when the rule denies or holds a call.
	Reason string `yaml:"reason"`
}

// Budget scopes.
const (
	ScopeTenant  = "tenant"
	ScopeSession = "session"
)

// Budget caps the calls spending Effect to Limit per window of length Per.
// Windows are fixed and aligned to the Unix epoch (a "1h" budget resets on
// the hour, UTC). Each call spends one unit of each of its effects.
type Budget struct {
	Effect tools.Effect `yaml:"effect"`
	Limit  int64        `yaml:"limit"`
	Per    Duration     `yaml:"per"`
	// Scope is "tenant" (default: one counter for the whole tenant) or
	// "session" (one counter per session; calls outside a session are not
	// counted).
	Scope string `yaml:"scope"`
}

// scope returns the effective scope ("" means tenant).
func (b *Budget) scope() string {
	if b.Scope == "" {
		return ScopeTenant
	}
	return b.Scope
}

// ToolLimit caps the calls of a tool over a session's whole life (like
// CrewAI's max_usage_count). Calls outside a session are not counted. A glob
// counts all the tools it matches together: {tool: "*", max_calls: 50} caps
// a session at 50 calls.
type ToolLimit struct {
	Tool     string `yaml:"tool"`
	MaxCalls int64  `yaml:"max_calls"`
}

// RateLimit is a token bucket per tenant: Rate calls per second on average,
// Burst at once. Burst 0 means max(1, ceil(Rate)).
type RateLimit struct {
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
}

// burst returns the effective bucket size.
func (r *RateLimit) burst() float64 {
	if r.Burst > 0 {
		return float64(r.Burst)
	}
	return max(1, math.Ceil(r.Rate))
}

// DefaultApprovalTimeout is how long a call held for approval waits when
// approvals.timeout is not set.
const DefaultApprovalTimeout = 15 * time.Minute

// ApprovalConfig configures calls held for approval (action confirm).
type ApprovalConfig struct {
	// Timeout expires a pending approval (0: DefaultApprovalTimeout).
	Timeout Duration `yaml:"timeout"`
	// Webhook, when set, is told about every pending approval.
	Webhook *WebhookConfig `yaml:"webhook"`
}

// TimeoutOrDefault returns Timeout, or DefaultApprovalTimeout when unset.
func (a ApprovalConfig) TimeoutOrDefault() time.Duration {
	if a.Timeout <= 0 {
		return DefaultApprovalTimeout
	}
	return time.Duration(a.Timeout)
}

// WebhookConfig is where pending approvals are posted. Secret signs the
// body so the receiver can authenticate it; it is required.
type WebhookConfig struct {
	URL    string `yaml:"url"`
	Secret string `yaml:"secret"`
}

// Duration is a time.Duration written as a Go duration string ("1h",
// "30s") or 0.
type Duration time.Duration

// UnmarshalYAML reads "1h30m" (or 0).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration like \"1h\"", n.Line)
	}
	if n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: invalid duration %q (want e.g. \"30s\", \"1h\")", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return fmtDuration(time.Duration(d)), nil }

// String is the short form: "1h", "1h30m", "250ms".
func (d Duration) String() string { return fmtDuration(time.Duration(d)) }

// fmtDuration drops zero trailing units from time.Duration.String:
// "1h0m0s" becomes "1h", "2m0s" becomes "2m".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// ParseTenantPolicy decodes one tenant's policy from YAML strictly (an
// unknown key is an error naming it) and validates it.
func ParseTenantPolicy(data []byte) (TenantPolicy, error) {
	var p TenantPolicy
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return TenantPolicy{}, fmt.Errorf("policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return TenantPolicy{}, err
	}
	return p, nil
}

// Validate reports every problem of the policy, one error per problem,
// each naming its key path ("policy.rules[2].action: ...") and quoting the
// bad value.
func (p *TenantPolicy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if p.Default != "" && !p.Default.valid() {
		bad("policy.default: %q is not one of allow, deny, confirm", p.Default)
	}
	for i, r := range p.Rules {
		at := fmt.Sprintf("policy.rules[%d]", i)
		if r.Tool == "" && r.Effect == "" {
			bad("%s: needs a tool, an effect or both", at)
		}
		if r.Tool != "" {
			if _, err := path.Match(r.Tool, ""); err != nil {
				bad("%s.tool: %q is not a valid glob", at, r.Tool)
			}
		}
		if r.Effect != "" && !r.Effect.Valid() {
			bad("%s.effect: %q is not one of %s", at, r.Effect, effectList())
		}
		if !r.Action.valid() {
			bad("%s.action: %q is not one of allow, deny, confirm", at, r.Action)
		}
	}
	for i, b := range p.Budgets {
		at := fmt.Sprintf("policy.budgets[%d]", i)
		if !b.Effect.Valid() {
			bad("%s.effect: %q is not one of %s", at, b.Effect, effectList())
		}
		if b.Limit <= 0 {
			bad("%s.limit: %d must be > 0 (to forbid an effect, use a deny rule)", at, b.Limit)
		}
		if b.Per <= 0 {
			bad("%s.per: must be > 0", at)
		}
		if b.Scope != "" && b.Scope != ScopeTenant && b.Scope != ScopeSession {
			bad("%s.scope: %q is not one of tenant, session", at, b.Scope)
		}
	}
	for i, l := range p.ToolLimits {
		at := fmt.Sprintf("policy.tool_limits[%d]", i)
		if l.Tool == "" {
			bad("%s.tool: required", at)
		} else if _, err := path.Match(l.Tool, ""); err != nil {
			bad("%s.tool: %q is not a valid glob", at, l.Tool)
		}
		if l.MaxCalls <= 0 {
			bad("%s.max_calls: %d must be > 0 (to forbid a tool, use a deny rule)", at, l.MaxCalls)
		}
	}
	if r := p.RateLimit; r != nil {
		if !(r.Rate > 0) || math.IsInf(r.Rate, 0) {
			bad("policy.rate_limit.rate: %v must be a number of calls per second > 0", r.Rate)
		}
		if r.Burst < 0 {
			bad("policy.rate_limit.burst: %d must be >= 0", r.Burst)
		}
	}
	if p.Approvals.Timeout < 0 {
		bad("policy.approvals.timeout: %q must be >= 0", p.Approvals.Timeout)
	}
	if w := p.Approvals.Webhook; w != nil {
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("policy.approvals.webhook.url: %q is not an absolute http or https URL", w.URL)
		}
		if w.Secret == "" {
			bad("policy.approvals.webhook.secret: required (it signs the webhook's body)")
		}
	}
	errs = append(errs, validateEgress(&p.Egress)...)
	return errors.Join(errs...)
}

func effectList() string {
	s := make([]string, len(tools.AllEffects))
	for i, e := range tools.AllEffects {
		s[i] = string(e)
	}
	return strings.Join(s, ", ")
}

// validateEgress runs EgressPolicy.Validate and puts "policy.egress."
// before each problem it reports ("allow[0].host: ..." becomes
// "policy.egress.allow[0].host: ...").
func validateEgress(e *EgressPolicy) []error {
	err := e.Validate()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("policy.egress.%w", e)
	}
	return out
}
