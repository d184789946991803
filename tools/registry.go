package tools

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// namePattern is OpenAI's rule for function names; the strictest of the
// formats we export to.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// DefaultAliases returns the names models commonly use for the built-in
// tools (alias → tool). NewRegistry installs them; AddAlias adds more.
func DefaultAliases() map[string]string {
	return map[string]string{
		"file_read": "read_file",
		"shell":     "bash",
		"python":    "python_repl",
	}
}

// entry is a registered tool and what registration computed for it.
type entry struct {
	tool    *Tool
	input   *jsonschema.Schema // compiled InputSchema
	output  *jsonschema.Schema // compiled OutputSchema, nil when unset
	wrapped bool               // InputSchema wraps a non-object schema under WrapKey
}

// Registry holds tools by name with aliases. Lookups are case-insensitive;
// a real tool name always wins over an alias of the same name. It is safe
// for concurrent use. The zero value is an empty registry without aliases;
// NewRegistry adds the default ones.
type Registry struct {
	mu      sync.RWMutex
	order   []string          // lower-case names in first-insertion order
	entries map[string]*entry // by lower-case name
	aliases map[string]string // lower-case alias → target name
	// miss, when set, is asked about a name no tool has (SetMissHook).
	miss func(name string) bool
}

// SetMissHook installs fn, called (without the registry's lock) when
// Lookup or Prepare finds no tool of a name: a source that registers
// tools on demand (a lazy MCP provider, started by the first call of one
// of its tools) registers it and returns true, and the lookup is tried
// again. fn must bound its own wait.
func (r *Registry) SetMissHook(fn func(name string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.miss = fn
}

// onMiss asks the miss hook about name; r.mu must not be held.
func (r *Registry) onMiss(name string) bool {
	r.mu.RLock()
	fn := r.miss
	r.mu.RUnlock()
	return fn != nil && fn(name)
}

// NewRegistry returns an empty registry with DefaultAliases
// (file_read→read_file, shell→bash, python→python_repl).
func NewRegistry() *Registry {
	r := &Registry{entries: map[string]*entry{}, aliases: map[string]string{}}
	for a, t := range DefaultAliases() {
		r.aliases[strings.ToLower(a)] = t
	}
	return r
}

// Register adds t, or replaces the tool of the same (case-insensitive) name
// in place: the last registration wins and keeps the first one's position.
//
// Registration validates and normalises a copy of t (t itself is not
// modified): the name must match ^[a-zA-Z0-9_-]{1,64}$; effects must be of
// the closed set (duplicates are dropped); a Command tool must declare exec;
// Run and Command are mutually exclusive; a missing input schema becomes an
// empty object schema, a non-object one is wrapped under WrapKey; both
// schemas must compile (draft 2020-12 by default, no external references);
// a blank description becomes a one-line summary such as
// "bash(command, timeout_seconds)". Errors wrap ErrInvalidTool.
func (r *Registry) Register(t *Tool) error {
	e, err := newEntry(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.put(e)
	return nil
}

// initLocked makes the zero Registry usable; r.mu must be held for writing.
func (r *Registry) initLocked() {
	if r.entries == nil {
		r.entries = map[string]*entry{}
	}
	if r.aliases == nil {
		r.aliases = map[string]string{}
	}
}

// put stores e; r.mu must be held for writing.
func (r *Registry) put(e *entry) {
	r.initLocked()
	key := strings.ToLower(e.tool.Name)
	if _, ok := r.entries[key]; !ok {
		r.order = append(r.order, key)
	}
	r.entries[key] = e
}

func newEntry(t *Tool) (*entry, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil tool", ErrInvalidTool)
	}
	if !namePattern.MatchString(t.Name) {
		return nil, fmt.Errorf("%w: name %q must be 1-64 letters, digits, '_' or '-'", ErrInvalidTool, t.Name)
	}
	c := *t
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: tool %s: %s", ErrInvalidTool, c.Name, fmt.Sprintf(format, args...))
	}
	var effects []Effect
	for _, e := range t.Effects {
		if !e.Valid() {
			return nil, invalid("unknown effect %q (want one of file_read, file_write, exec, http)", string(e))
		}
		if !slices.Contains(effects, e) {
			effects = append(effects, e)
		}
	}
	c.Effects = effects
	if c.Run != nil && c.Command != nil {
		return nil, invalid("set Run or Command, not both")
	}
	if c.Command != nil && !c.HasEffect(EffectExec) {
		return nil, invalid("a Command tool runs a process and must declare the exec effect")
	}
	ns, err := normalizeInputSchema(t.InputSchema)
	if err != nil {
		return nil, invalid("%v", err)
	}
	c.InputSchema = ns.raw
	e := &entry{tool: &c, wrapped: ns.wrapped}
	if e.input, err = compileSchema("sandboxd:tools/"+c.Name+"/input.json", ns.raw); err != nil {
		return nil, invalid("input schema: %v", err)
	}
	if out := strings.TrimSpace(string(t.OutputSchema)); out == "" || out == "null" {
		c.OutputSchema = nil
	} else {
		raw := json.RawMessage(slices.Clone(t.OutputSchema))
		if e.output, err = compileSchema("sandboxd:tools/"+c.Name+"/output.json", raw); err != nil {
			return nil, invalid("output schema: %v", err)
		}
		c.OutputSchema = raw
	}
	if strings.TrimSpace(c.Description) == "" {
		c.Description = defaultDescription(c.Name, ns.props)
	}
	return e, nil
}

// Remove deletes the tool named name (case-insensitively; an alias is not
// followed) and reports whether there was one. Aliases pointing at it
// stay and resolve again once a tool of that name is registered.
func (r *Registry) Remove(name string) bool {
	key := strings.ToLower(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[key]; !ok {
		return false
	}
	delete(r.entries, key)
	r.order = slices.DeleteFunc(r.order, func(k string) bool { return k == key })
	return true
}

// AddAlias makes alias resolve to the tool named target (which need not be
// registered yet). A tool really named alias shadows the alias.
func (r *Registry) AddAlias(alias, target string) error {
	if !namePattern.MatchString(alias) {
		return fmt.Errorf("%w: alias %q must be 1-64 letters, digits, '_' or '-'", ErrInvalidTool, alias)
	}
	if !namePattern.MatchString(target) {
		return fmt.Errorf("%w: alias target %q must be 1-64 letters, digits, '_' or '-'", ErrInvalidTool, target)
	}
	if strings.EqualFold(alias, target) {
		return fmt.Errorf("%w: alias %q points at itself", ErrInvalidTool, alias)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	r.aliases[strings.ToLower(alias)] = target
	return nil
}

// Aliases returns a copy of the alias table (lower-case alias → target).
func (r *Registry) Aliases() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.aliases)
}

// Lookup finds a tool by name or alias, case-insensitively. The returned
// tool is shared: callers must not modify it.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	for try := 0; try < 2; try++ {
		r.mu.RLock()
		e := r.find(name)
		r.mu.RUnlock()
		if e != nil {
			return e.tool, true
		}
		if try == 0 && !r.onMiss(name) {
			break
		}
	}
	return nil, false
}

// find resolves name; r.mu must be held.
func (r *Registry) find(name string) *entry {
	key := strings.ToLower(name)
	if e, ok := r.entries[key]; ok {
		return e
	}
	if target, ok := r.aliases[key]; ok {
		return r.entries[strings.ToLower(target)]
	}
	return nil
}

// Names returns tool names in insertion order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, len(r.order))
	for i, k := range r.order {
		names[i] = r.entries[k].tool.Name
	}
	return names
}

// Tools returns the tools in insertion order. They are shared: callers must
// not modify them.
func (r *Registry) Tools() []*Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ts := make([]*Tool, len(r.order))
	for i, k := range r.order {
		ts[i] = r.entries[k].tool
	}
	return ts
}

// Len returns the number of tools.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.order)
}

// Merge registers every tool of other, in other's order, with Register's
// last-wins rule (a tool r already has is replaced in place), and copies
// other's aliases (other's win). Tools were validated when other got them,
// so Merge cannot fail.
func (r *Registry) Merge(other *Registry) {
	if other == nil {
		return
	}
	other.mu.RLock()
	entries := make([]*entry, len(other.order))
	for i, k := range other.order {
		entries[i] = other.entries[k]
	}
	aliases := maps.Clone(other.aliases)
	other.mu.RUnlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	for _, e := range entries {
		r.put(e)
	}
	maps.Copy(r.aliases, aliases)
}

// unknownTool explains a failed lookup: the closest known name and a few
// others. r.mu must be held.
func (r *Registry) unknownTool(name string) error {
	known := make([]string, 0, len(r.order)+len(r.aliases))
	for _, k := range r.order {
		known = append(known, r.entries[k].tool.Name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%q", short(name))
	candidates := slices.Clone(known)
	for a, t := range r.aliases {
		if r.entries[strings.ToLower(t)] != nil {
			candidates = append(candidates, a)
		}
	}
	slices.Sort(candidates[len(known):]) // aliases: deterministic order
	if best := closest(name, candidates); best != "" {
		if e := r.find(best); e != nil {
			best = e.tool.Name
		}
		fmt.Fprintf(&b, ": did you mean %q?", best)
	}
	switch {
	case len(known) == 0:
		b.WriteString(" (no tools are registered)")
	case len(known) <= 8:
		fmt.Fprintf(&b, " (known tools: %s)", strings.Join(known, ", "))
	default:
		fmt.Fprintf(&b, " (known tools: %s, and %d more)", strings.Join(known[:8], ", "), len(known)-8)
	}
	return fmt.Errorf("%w %s", ErrUnknownTool, b.String())
}

// closest returns the candidate nearest to name by edit distance
// (case-insensitive), or "" when none is near enough to be a likely typo.
func closest(name string, candidates []string) string {
	name = strings.ToLower(name)
	best, bestDist := "", -1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := editDistance(name, lc)
		if len(name) >= 3 && len(lc) >= 3 && (strings.Contains(lc, name) || strings.Contains(name, lc)) {
			d = min(d, 2)
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist < 0 || bestDist > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // names are at most 64 bytes; do not spend time on junk
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
