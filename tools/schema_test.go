package tools

import (
	"encoding/json"
	"testing"
)

func TestInputSchemaNormalisation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		schema   string
		want     string // normalised schema, compared by value
		wantDesc string
	}{
		{"missing", ``, `{"type":"object","properties":{}}`, "t()"},
		{"null", `null`, `{"type":"object","properties":{}}`, "t()"},
		{"object kept", `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}`,
			`{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}`, "t(b, a)"},
		{"typeless object gets a type", `{"properties":{"a":{}},"required":["a"]}`,
			`{"type":"object","properties":{"a":{}},"required":["a"]}`, "t(a)"},
		{"string wrapped", `{"type":"string","description":"text"}`,
			`{"type":"object","properties":{"input":{"type":"string","description":"text"}},"required":["input"]}`, "t(input)"},
		{"array wrapped", `{"type":"array","items":{"type":"number"}}`,
			`{"type":"object","properties":{"input":{"type":"array","items":{"type":"number"}}},"required":["input"]}`, "t(input)"},
		{"nullable object wrapped", `{"type":["object","null"]}`,
			`{"type":"object","properties":{"input":{"type":["object","null"]}},"required":["input"]}`, "t(input)"},
		{"true is any object", `true`, `{"type":"object","properties":{}}`, "t()"},
		{"empty is any object", `{}`, `{"type":"object"}`, "t()"},
		{"annotations only", `{"description":"no arguments"}`, `{"type":"object","description":"no arguments"}`, "t()"},
		{"false wrapped", `false`,
			`{"type":"object","properties":{"input":false},"required":["input"]}`, "t(input)"},
		{"anyOf wrapped, $defs hoisted", `{"$defs":{"n":{"type":"number"}},"anyOf":[{"$ref":"#/$defs/n"},{"type":"string"}]}`,
			`{"type":"object","properties":{"input":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"string"}]}},"required":["input"],"$defs":{"n":{"type":"number"}}}`, "t(input)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRegistry()
			if err := r.Register(&Tool{Name: "t", InputSchema: json.RawMessage(tt.schema), Run: noopRun}); err != nil {
				t.Fatal(err)
			}
			got, _ := r.Lookup("t")
			if canonical(t, string(got.InputSchema)) != canonical(t, tt.want) {
				t.Errorf("schema = %s\nwant     %s", got.InputSchema, tt.want)
			}
			if got.Description != tt.wantDesc {
				t.Errorf("description = %q, want %q", got.Description, tt.wantDesc)
			}
		})
	}
}

func TestDescriptionKeptWhole(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	bash, _ := r.Lookup("bash")
	if want := "Run a shell command.\nThe workspace is the current directory."; bash.Description != want {
		t.Errorf("description = %q", bash.Description)
	}
	if bash.Summary() != "Run a shell command." {
		t.Errorf("Summary() = %q", bash.Summary())
	}
	py, _ := r.Lookup("python_repl")
	if py.Description != "python_repl(code, mode, packages)" {
		t.Errorf("fallback description = %q", py.Description)
	}
	if (&Tool{Description: "\n\n  first  \nsecond"}).Summary() != "first" {
		t.Error("Summary skips blank lines")
	}
	if !bash.Runnable() || (&Tool{}).Runnable() {
		t.Error("Runnable")
	}
}
