package tools

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestExportShapes(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		format Format
		names  []string
		want   string
	}{
		{FormatOpenAI, []string{"read_file"}, `[{"type":"function","function":{"name":"read_file","description":"Read a file.","parameters":` + readFileSchema + `}}]`},
		{FormatAnthropic, []string{"read_file"}, `[{"name":"read_file","description":"Read a file.","input_schema":` + readFileSchema + `}]`},
		{FormatMCP, []string{"read_file"}, `[{"name":"read_file","description":"Read a file.","inputSchema":` + readFileSchema + `,
			"annotations":{"readOnlyHint":true,"destructiveHint":false,"openWorldHint":false,"idempotentHint":true}}]`},
		{FormatMCP, []string{"http_get"}, `[{"name":"http_get","description":"GET a URL.",
			"inputSchema":{"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]},
			"outputSchema":{"type":"object","properties":{"status":{"type":"integer"}}},
			"annotations":{"readOnlyHint":true,"destructiveHint":false,"openWorldHint":true,"idempotentHint":false}}]`},
		{FormatMCP, []string{"shell"}, `[{"name":"bash","description":"Run a shell command.\nThe workspace is the current directory.","inputSchema":` + bashSchema + `,
			"annotations":{"readOnlyHint":false,"destructiveHint":true,"openWorldHint":false,"idempotentHint":false}}]`},
		{FormatAnthropic, []string{"echo"}, `[{"name":"echo","description":"Echo a string.",
			"input_schema":{"type":"object","properties":{"input":{"type":"string","maxLength":20}},"required":["input"]}}]`},
	}
	for _, tt := range tests {
		t.Run(string(tt.format)+"/"+tt.names[0], func(t *testing.T) {
			t.Parallel()
			got, err := r.Export(tt.format, tt.names...)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := canonical(t, mustJSON(t, got)), canonical(t, tt.want); g != w {
				t.Errorf("export =\n%s\nwant\n%s", g, w)
			}
		})
	}
}

func TestExportKeepsPropertyOrder(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Register(&Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"zeta":{},"alpha":{}}}`), Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Export(FormatOpenAI)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"function":{"description":"t(zeta, alpha)","name":"t","parameters":{"type":"object","properties":{"zeta":{},"alpha":{}}}},"type":"function"}]`; mustJSON(t, got) != want {
		t.Errorf("export = %s\nwant     %s", mustJSON(t, got), want)
	}
}

func TestExportAllInOrder(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	for _, f := range Formats {
		got, err := r.Export(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(r.Names()) {
			t.Fatalf("%s: %d tools, want %d", f, len(got), len(r.Names()))
		}
		for i, name := range r.Names() {
			m := got[i]
			if f == FormatOpenAI {
				m = m["function"].(map[string]any)
			}
			if m["name"] != name {
				t.Errorf("%s: tool %d = %v, want %s", f, i, m["name"], name)
			}
		}
		if f == FormatMCP {
			if _, ok := got[0]["outputSchema"]; ok {
				t.Error("outputSchema present without an output schema")
			}
		}
	}
	// Names: aliases resolve, duplicates drop, order is the caller's.
	got, err := r.Export(FormatAnthropic, "read_file", "shell", "BASH")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["name"] != "read_file" || got[1]["name"] != "bash" {
		t.Errorf("export = %v", got)
	}
	// Fresh copies: changing one export leaves the registry alone.
	got[0]["input_schema"].(json.RawMessage)[0] = 'X'
	again, _ := r.Export(FormatAnthropic, "read_file")
	if again[0]["input_schema"].(json.RawMessage)[0] != '{' {
		t.Error("export shares schema bytes with the registry")
	}
}

func TestExportErrors(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	if _, err := r.Export("gemini"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("unknown format: err = %v", err)
	}
	if _, err := r.Export(FormatMCP, "bash", "nope"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool: err = %v", err)
	}
}

func TestMCPOutputSchemaOnlyForObjects(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Register(&Tool{Name: "t", OutputSchema: json.RawMessage(`{"type":"string"}`), Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	got, _ := r.Export(FormatMCP)
	if _, ok := got[0]["outputSchema"]; ok {
		t.Errorf("non-object outputSchema exported: %v", got[0])
	}
}

func TestMCPAnnotations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		effects                                      []Effect
		idempotent                                   bool
		readOnly, destructive, world, idempotentHint bool
	}{
		{nil, false, true, false, false, true},
		{[]Effect{EffectFileRead}, false, true, false, false, true},
		{[]Effect{EffectFileWrite}, false, false, true, false, false},
		{[]Effect{EffectExec}, false, false, false, false, false},
		{[]Effect{EffectExec}, true, false, false, false, true},
		{[]Effect{EffectHTTP}, false, true, false, true, false},
		{[]Effect{EffectFileRead, EffectHTTP, EffectExec}, false, false, false, true, false},
		{[]Effect{EffectExec, EffectFileRead, EffectFileWrite}, false, false, true, false, false},
	}
	for _, tt := range tests {
		t.Run(mustJSON(t, tt.effects), func(t *testing.T) {
			t.Parallel()
			a := MCPAnnotations(&Tool{Effects: tt.effects, Idempotent: tt.idempotent})
			if a["readOnlyHint"] != tt.readOnly || a["destructiveHint"] != tt.destructive ||
				a["openWorldHint"] != tt.world || a["idempotentHint"] != tt.idempotentHint {
				t.Errorf("annotations = %v", a)
			}
		})
	}
}

// TestAnnotationsRoundTrip: the mapping read backwards (Narrow) never
// takes away an effect the tool has and removes every effect the
// annotations rule out; it never adds one.
func TestAnnotationsRoundTrip(t *testing.T) {
	t.Parallel()
	subsets := [][]Effect{nil}
	for _, e := range AllEffects {
		for _, s := range subsets {
			subsets = append(subsets, append(slices.Clone(s), e))
		}
	}
	for _, effects := range subsets {
		got := AnnotationsOf(effects, false).Narrow(AllEffects)
		for _, e := range effects {
			if !slices.Contains(got, e) {
				t.Errorf("%v: Narrow(all) = %v dropped %s", effects, got, e)
			}
		}
		// What survives beyond the tool's own effects is only what the
		// hints cannot express: file_read, and exec when file_write is there.
		for _, e := range got {
			if slices.Contains(effects, e) || e == EffectFileRead {
				continue
			}
			if e == EffectExec && slices.Contains(effects, EffectFileWrite) {
				continue
			}
			t.Errorf("%v: Narrow(all) = %v kept %s", effects, got, e)
		}
		if n := AnnotationsOf(effects, false).Narrow(nil); len(n) != 0 {
			t.Errorf("Narrow(nil) = %v", n)
		}
	}
	no := false
	a := Annotations{Destructive: &no}
	if got := a.Narrow([]Effect{EffectHTTP, EffectFileWrite}); !slices.Equal(got, []Effect{EffectHTTP}) {
		t.Errorf("destructiveHint false: %v", got)
	}
	if got := (Annotations{}).Narrow(AllEffects); !slices.Equal(got, AllEffects) {
		t.Errorf("no hints stated narrowed %v", got)
	}
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Format
		err  bool
	}{
		{"", FormatOpenAI, false},
		{"openai", FormatOpenAI, false},
		{" Anthropic ", FormatAnthropic, false},
		{"MCP", FormatMCP, false},
		{"gemini", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFormat(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("ParseFormat(%q) = %q, %v", tt.in, got, err)
			}
			if err != nil && !errors.Is(err, ErrUnknownFormat) {
				t.Errorf("err = %v, want ErrUnknownFormat", err)
			}
		})
	}
}

// TestExportReturnDirect: a return_direct tool carries x-return-direct in
// every format; another tool does not.
func TestExportReturnDirect(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	for _, tool := range []*Tool{
		{Name: "answer", Description: "d", ReturnDirect: true, Run: func(context.Context, Env, map[string]any) (Result, error) { return Result{}, nil }},
		{Name: "other", Description: "d", Run: func(context.Context, Env, map[string]any) (Result, error) { return Result{}, nil }},
	} {
		if err := r.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range Formats {
		out, err := r.Export(f)
		if err != nil {
			t.Fatal(err)
		}
		if out[0][ReturnDirectField] != true {
			t.Errorf("%s: the return_direct tool lacks %s: %v", f, ReturnDirectField, out[0])
		}
		if _, ok := out[1][ReturnDirectField]; ok {
			t.Errorf("%s: the other tool has %s: %v", f, ReturnDirectField, out[1])
		}
	}
}
