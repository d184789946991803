package policy

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// tenantGuard is one tenant's compiled policy and its counters. The
// compiled part is read-only; everything below mu is guarded by it.
type tenantGuard struct {
	name    string
	enabled bool
	def     Action
	defIdx  int // label index of "default"
	rateIdx int // label index of "rate_limit"
	rules   []compiledRule
	budgets []compiledBudget
	limits  []compiledLimit
	rate    *RateLimit
	burst   float64
	// labels are the values of Decision.Rule, indexed by the label
	// indexes held by the compiled parts.
	labels []string
	// nTenantWin, nSessionWin and nUses size the counter slices; slots
	// maps a Spend's counter to its slot.
	nTenantWin, nSessionWin, nUses int
	slots                          map[counterID]int

	mu        sync.Mutex
	tokens    float64 // rate limit bucket
	last      int64   // UnixNano of the last refill
	tenantWin []window
	sessions  map[string]*sessionCounters
	decisions []uint64 // [label*numOutcomes + outcome]
	nextPrune int64
	seen      int64 // latest clock reading (UnixNano), see clock
}

type compiledRule struct {
	tool   string // "" matches any tool
	glob   bool
	effect tools.Effect // "" matches any effects
	action Action
	reason string
	label  int
}

type compiledBudget struct {
	effect  tools.Effect
	limit   int64
	per     int64 // nanoseconds
	session bool
	slot    int  // into tenantWin or sessionCounters.win
	primary bool // first budget of its slot: the one that reserves
	key     string
	label   int
}

type compiledLimit struct {
	tool    string
	glob    bool
	max     int64
	slot    int // into sessionCounters.uses
	primary bool
	key     string
	label   int
}

// counterID identifies a counter across restarts (it is what a Spend
// names): budgets with the same effect, window and scope share one.
type counterID struct {
	session bool
	key     string
	window  time.Duration // 0 for tool limits
}

// window is a fixed window's count; start and end are UnixNano.
type window struct {
	start, end int64
	used       int64
}

type sessionCounters struct {
	win  []window
	uses []int64
}

const numOutcomes = 3

func outcomeIndex(o Outcome) int {
	switch o {
	case OutcomeAllow:
		return 0
	case OutcomeDeny:
		return 1
	default:
		return 2
	}
}

var outcomeByIndex = [numOutcomes]Outcome{OutcomeAllow, OutcomeDeny, OutcomeConfirm}

// compileTenant turns a validated policy into a tenantGuard.
func compileTenant(name string, p *TenantPolicy, now time.Time) *tenantGuard {
	t := &tenantGuard{
		name:     name,
		def:      p.Default,
		slots:    map[counterID]int{},
		sessions: map[string]*sessionCounters{},
	}
	if t.def == "" {
		t.def = ActionAllow
	}
	label := func(s string) int { t.labels = append(t.labels, s); return len(t.labels) - 1 }
	for i, r := range p.Rules {
		t.rules = append(t.rules, compiledRule{
			tool: r.Tool, glob: isGlob(r.Tool), effect: r.Effect, action: r.Action, reason: r.Reason,
			label: label(fmt.Sprintf("rules[%d]", i)),
		})
	}
	t.defIdx = label("default")
	t.rateIdx = label("rate_limit")
	for i, b := range p.Budgets {
		session := b.scope() == ScopeSession
		key := "effect:" + string(b.Effect)
		id := counterID{session: session, key: key, window: time.Duration(b.Per)}
		slot, seen := t.slots[id]
		if !seen {
			if session {
				slot = t.nSessionWin
				t.nSessionWin++
			} else {
				slot = t.nTenantWin
				t.nTenantWin++
			}
			t.slots[id] = slot
		}
		t.budgets = append(t.budgets, compiledBudget{
			effect: b.Effect, limit: b.Limit, per: int64(b.Per), session: session,
			slot: slot, primary: !seen, key: key, label: label(fmt.Sprintf("budgets[%d]", i)),
		})
	}
	for i, l := range p.ToolLimits {
		key := "tool:" + l.Tool
		id := counterID{session: true, key: key}
		slot, seen := t.slots[id]
		if !seen {
			slot = t.nUses
			t.nUses++
			t.slots[id] = slot
		}
		t.limits = append(t.limits, compiledLimit{
			tool: l.Tool, glob: isGlob(l.Tool), max: l.MaxCalls,
			slot: slot, primary: !seen, key: key, label: label(fmt.Sprintf("tool_limits[%d]", i)),
		})
	}
	if p.RateLimit != nil {
		rl := *p.RateLimit
		t.rate = &rl
		t.burst = rl.burst()
		t.tokens = t.burst
		t.last = now.UnixNano()
	}
	t.tenantWin = make([]window, t.nTenantWin)
	t.decisions = make([]uint64, len(t.labels)*numOutcomes)
	t.enabled = len(t.rules) > 0 || t.def != ActionAllow || len(t.budgets) > 0 || len(t.limits) > 0 || t.rate != nil
	return t
}

func isGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

func matchTool(pattern string, glob bool, tool string) bool {
	if !glob {
		return pattern == tool
	}
	ok, _ := path.Match(pattern, tool) // patterns were validated
	return ok
}

func hasEffect(effects []tools.Effect, e tools.Effect) bool {
	for _, x := range effects {
		if x == e {
			return true
		}
	}
	return false
}

// match returns the action of the first rule matching req (or the
// default) and its label index.
func (t *tenantGuard) match(req Request) (Action, int) {
	for i := range t.rules {
		r := &t.rules[i]
		if r.tool != "" && !matchTool(r.tool, r.glob, req.Tool) {
			continue
		}
		if r.effect != "" && !hasEffect(req.Effects, r.effect) {
			continue
		}
		return r.action, r.label
	}
	return t.def, t.defIdx
}

// count records a decision; t.mu is held.
func (t *tenantGuard) count(label int, o Outcome) {
	t.decisions[label*numOutcomes+outcomeIndex(o)]++
}

// ruleReason returns the reason an operator wrote on the rule at label,
// if any.
func (t *tenantGuard) ruleReason(label int) string {
	if label < len(t.rules) { // rules take the first labels
		return t.rules[label].reason
	}
	return ""
}

func (t *tenantGuard) denyReason(label int, tool string) string {
	if r := t.ruleReason(label); r != "" {
		return r
	}
	if label == t.defIdx {
		return fmt.Sprintf("tool %q is not allowed by this tenant's policy", tool)
	}
	return fmt.Sprintf("tool %q is denied by this tenant's policy", tool)
}

func (t *tenantGuard) confirmReason(label int, tool string) string {
	if r := t.ruleReason(label); r != "" {
		return r
	}
	return fmt.Sprintf("tool %q needs a human's approval before it runs", tool)
}
