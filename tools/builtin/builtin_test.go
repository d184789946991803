package builtin

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandboxd/sandboxd/tools"
)

func toolByName(t *testing.T, name string) *tools.Tool {
	t.Helper()
	for _, tl := range Tools(Options{}) {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

func TestToolsContract(t *testing.T) {
	t.Parallel()
	// parallel: the tool keeps no state of its own, so outside a session
	// (a fresh sandbox and workspace per call) its calls may run at once.
	want := map[string]struct {
		effects  []tools.Effect
		parallel bool
		command  bool
	}{
		"python_repl":  {[]tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite}, true, true},
		"bash":         {[]tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite}, true, true},
		"read_file":    {[]tools.Effect{tools.EffectFileRead}, true, false},
		"write_file":   {[]tools.Effect{tools.EffectFileWrite}, true, false},
		"list_dir":     {[]tools.Effect{tools.EffectFileRead}, true, false},
		"glob_search":  {[]tools.Effect{tools.EffectFileRead}, true, false},
		"grep_search":  {[]tools.Effect{tools.EffectFileRead}, true, false},
		"file_info":    {[]tools.Effect{tools.EffectFileRead}, true, false},
		"str_replace":  {[]tools.Effect{tools.EffectFileRead, tools.EffectFileWrite}, true, false},
		"calculator":   {nil, true, false},
		"http_request": {[]tools.Effect{tools.EffectHTTP}, true, false},
	}
	got := Tools(Options{})
	if len(got) != len(want) {
		t.Fatalf("Tools returned %d tools, want %d", len(got), len(want))
	}
	for _, tl := range got {
		t.Run(tl.Name, func(t *testing.T) {
			t.Parallel()
			w, ok := want[tl.Name]
			if !ok {
				t.Fatalf("unexpected tool %q", tl.Name)
			}
			if !slices.Equal(tl.Effects, w.effects) {
				t.Errorf("effects %v, want %v", tl.Effects, w.effects)
			}
			for _, e := range tl.Effects {
				if !e.Valid() {
					t.Errorf("invalid effect %q", e)
				}
			}
			if tl.ParallelSafe != w.parallel {
				t.Errorf("ParallelSafe %v, want %v", tl.ParallelSafe, w.parallel)
			}
			if (tl.Command != nil) != w.command || (tl.Run != nil) == w.command {
				t.Errorf("Run set %v, Command set %v; want exactly one (command=%v)", tl.Run != nil, tl.Command != nil, w.command)
			}
			if tl.Description == "" {
				t.Error("empty description")
			}
			checkSchema(t, tl.InputSchema, true)
			if tl.OutputSchema != nil {
				checkSchema(t, tl.OutputSchema, false)
			}
		})
	}
}

// checkSchema compiles s as draft 2020-12 and, for input schemas, checks it
// is a closed object whose every property is described.
func checkSchema(t *testing.T, s json.RawMessage, input bool) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(s))
	if err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile("mem://s.json"); err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	if !input {
		return
	}
	var m struct {
		Type  string                    `json:"type"`
		Add   *bool                     `json:"additionalProperties"`
		Props map[string]map[string]any `json:"properties"`
		Req   []string                  `json:"required"`
	}
	if err := json.Unmarshal(s, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "object" || m.Add == nil || *m.Add {
		t.Errorf("input schema must be an object with additionalProperties false: %s", s)
	}
	for name, p := range m.Props {
		if d, _ := p["description"].(string); d == "" {
			t.Errorf("property %q has no description", name)
		}
	}
	for _, r := range m.Req {
		if _, ok := m.Props[r]; !ok {
			t.Errorf("required property %q not declared", r)
		}
	}
}

func TestToolsFreshValues(t *testing.T) {
	t.Parallel()
	a, b := Tools(Options{}), Tools(Options{})
	a[0].Description = "changed"
	a[0].Effects[0] = tools.EffectHTTP
	if b[0].Description == "changed" || b[0].Effects[0] == tools.EffectHTTP {
		t.Fatal("Tools shares values between calls")
	}
}

func TestOptionsCeilings(t *testing.T) {
	t.Parallel()
	o := Options{MaxEntries: 50, MaxMatches: 7}.withDefaults()
	if got := argInt(map[string]any{"max_entries": 1e9}, "max_entries", 10, 1, o.MaxEntries); got != 50 {
		t.Errorf("max_entries clamp = %d, want 50", got)
	}
	if o.MaxReadBytes != DefaultMaxReadBytes || o.WorkDir != "/workspace" {
		t.Errorf("defaults not applied: %+v", o)
	}
}
