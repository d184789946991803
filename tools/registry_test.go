package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRegisterRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tool    *Tool
		wantMsg string
	}{
		{"nil", nil, "nil tool"},
		{"empty name", &Tool{}, `name ""`},
		{"space in name", &Tool{Name: "read file"}, `name "read file"`},
		{"dot in name", &Tool{Name: "fs.read"}, `name "fs.read"`},
		{"name too long", &Tool{Name: strings.Repeat("a", 65)}, "must be 1-64"},
		{"unknown effect", &Tool{Name: "x", Effects: []Effect{EffectExec, "network"}}, `unknown effect "network"`},
		{"both run and command", &Tool{Name: "x", Effects: []Effect{EffectExec}, Run: noopRun, Command: noopCommand}, "not both"},
		{"command without exec", &Tool{Name: "x", Command: noopCommand}, "must declare the exec effect"},
		{"schema not JSON", &Tool{Name: "x", InputSchema: json.RawMessage(`{"type":`)}, "not valid JSON"},
		{"schema a number", &Tool{Name: "x", InputSchema: json.RawMessage(`42`)}, "must be a JSON object or boolean"},
		{"schema does not compile", &Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"strng"}}}`)}, "input schema"},
		{"bad pattern", &Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`)}, "input schema"},
		{"external ref", &Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)}, "input schema"},
		{"bad output schema", &Tool{Name: "x", OutputSchema: json.RawMessage(`{"type":1}`)}, "output schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := NewRegistry().Register(tt.tool)
			if !errors.Is(err, ErrInvalidTool) {
				t.Fatalf("err = %v, want ErrInvalidTool", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestRegisterNormalises(t *testing.T) {
	t.Parallel()
	in := &Tool{Name: "Grep-2", Effects: []Effect{EffectFileRead, EffectFileRead}, InputSchema: json.RawMessage(`{"properties":{"pattern":{"type":"string"},"path":{"type":"string"}}}`), Run: noopRun}
	orig := *in
	r := NewRegistry()
	if err := r.Register(in); err != nil {
		t.Fatal(err)
	}
	got, ok := r.Lookup("grep-2")
	if !ok {
		t.Fatal("not found")
	}
	if got == in {
		t.Error("registry stores the caller's pointer; want a copy")
	}
	if in.Description != orig.Description || string(in.InputSchema) != string(orig.InputSchema) || len(in.Effects) != 2 {
		t.Error("Register modified the caller's tool")
	}
	if want := "Grep-2(pattern, path)"; got.Description != want {
		t.Errorf("description = %q, want %q (document order)", got.Description, want)
	}
	if !slices.Equal(got.Effects, []Effect{EffectFileRead}) {
		t.Errorf("effects = %v, want duplicates dropped", got.Effects)
	}
	if want := `{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}}}`; string(got.InputSchema) != want {
		t.Errorf("input schema = %s, want %s", got.InputSchema, want)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"bash", "bash", true},
		{"BASH", "bash", true},
		{"Read_File", "read_file", true},
		{"shell", "bash", true},
		{"SHELL", "bash", true},
		{"python", "python_repl", true},
		{"file_read", "read_file", true},
		{"nope", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := r.Lookup(tt.name)
			if ok != tt.ok {
				t.Fatalf("Lookup(%q) ok = %v, want %v", tt.name, ok, tt.ok)
			}
			if ok && got.Name != tt.want {
				t.Errorf("Lookup(%q) = %s, want %s", tt.name, got.Name, tt.want)
			}
		})
	}
}

func TestAliases(t *testing.T) {
	t.Parallel()
	t.Run("alias to a missing tool resolves to nothing", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry()
		if _, ok := r.Lookup("shell"); ok {
			t.Error("shell resolved without a bash tool")
		}
	})
	t.Run("AddAlias", func(t *testing.T) {
		t.Parallel()
		r := testRegistry(t)
		if err := r.AddAlias("Run_Command", "bash"); err != nil {
			t.Fatal(err)
		}
		if got, ok := r.Lookup("run_command"); !ok || got.Name != "bash" {
			t.Errorf("Lookup(run_command) = %v, %v", got, ok)
		}
		if r.Aliases()["run_command"] != "bash" {
			t.Errorf("Aliases() = %v", r.Aliases())
		}
	})
	t.Run("AddAlias rejects", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry()
		for _, tc := range [][2]string{{"bad name", "bash"}, {"sh", "bad target"}, {"Bash", "bash"}} {
			if err := r.AddAlias(tc[0], tc[1]); !errors.Is(err, ErrInvalidTool) {
				t.Errorf("AddAlias(%q, %q) = %v, want ErrInvalidTool", tc[0], tc[1], err)
			}
		}
	})
	t.Run("a real name wins over an alias", func(t *testing.T) {
		t.Parallel()
		r := testRegistry(t)
		if err := r.Register(&Tool{Name: "Shell", Description: "the real shell", Run: noopRun}); err != nil {
			t.Fatal(err)
		}
		got, ok := r.Lookup("shell")
		if !ok || got.Name != "Shell" {
			t.Errorf("Lookup(shell) = %v, want the tool named Shell", got)
		}
		if got, _ := r.Lookup("python"); got.Name != "python_repl" {
			t.Errorf("other aliases broken: %v", got.Name)
		}
	})
}

func TestRegisterLastWinsKeepsPosition(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	before := r.Names()
	if err := r.Register(&Tool{Name: "PYTHON_REPL", Description: "v2", Effects: []Effect{EffectExec}, Command: noopCommand}); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(before)
	want[1] = "PYTHON_REPL"
	if got := r.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got, _ := r.Lookup("python_repl"); got.Description != "v2" {
		t.Errorf("description = %q, want the last registration", got.Description)
	}
	if r.Len() != len(before) {
		t.Errorf("Len() = %d, want %d", r.Len(), len(before))
	}
	tools := r.Tools()
	if len(tools) != len(want) || tools[1].Description != "v2" {
		t.Errorf("Tools() = %v", tools)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	a := NewRegistry()
	b := NewRegistry()
	for _, n := range []string{"one", "two", "three"} {
		if err := a.Register(&Tool{Name: n, Description: "a", Run: noopRun}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"four", "TWO", "five", "one"} {
		if err := b.Register(&Tool{Name: n, Description: "b", Run: noopRun}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddAlias("deux", "two"); err != nil {
		t.Fatal(err)
	}
	a.Merge(b)
	a.Merge(nil)
	a.Merge(a) // merging itself changes nothing and must not deadlock
	want := []string{"one", "TWO", "three", "four", "five"}
	if got := a.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for _, n := range []string{"one", "two", "four", "five"} {
		if got, _ := a.Lookup(n); got.Description != "b" {
			t.Errorf("%s: description %q, want b (last wins)", n, got.Description)
		}
	}
	if got, _ := a.Lookup("three"); got.Description != "a" {
		t.Errorf("three lost")
	}
	if got, ok := a.Lookup("deux"); !ok || got.Name != "TWO" {
		t.Errorf("merged alias: %v %v", got, ok)
	}
	if got := b.Names(); !slices.Equal(got, []string{"four", "TWO", "five", "one"}) {
		t.Errorf("Merge changed its argument: %v", got)
	}
}

func TestUnknownToolMessage(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		name string
		want []string
		not  []string
	}{
		{"bsh", []string{`unknown tool "bsh"`, `did you mean "bash"?`, "known tools: bash, python_repl, read_file, echo, http_get"}, nil},
		{"read_fil", []string{`did you mean "read_file"?`}, nil},
		{"pyhton", []string{`did you mean "python_repl"?`}, nil},
		{"shel", []string{`did you mean "bash"?`}, nil}, // via the alias "shell"
		{"completely_different", []string{"known tools:"}, []string{"did you mean"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, _, err := r.Prepare(Call{Name: tt.name})
			if !errors.Is(err, ErrUnknownTool) {
				t.Fatalf("err = %v, want ErrUnknownTool", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want %q in it", err, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, do not want %q in it", err, w)
				}
			}
		})
	}
	t.Run("many tools", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry()
		for i := range 12 {
			if err := r.Register(&Tool{Name: fmt.Sprintf("tool%02d", i), Run: noopRun}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := r.Export(FormatOpenAI, "zzz")
		if !errors.Is(err, ErrUnknownTool) || !strings.Contains(err.Error(), "and 4 more") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("empty registry", func(t *testing.T) {
		t.Parallel()
		_, _, _, err := NewRegistry().Prepare(Call{Name: "bash"})
		if !errors.Is(err, ErrUnknownTool) || !strings.Contains(err.Error(), "no tools are registered") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	other := testRegistry(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				switch j % 6 {
				case 0:
					_ = r.Register(&Tool{Name: fmt.Sprintf("t%d", i), Run: noopRun})
				case 1:
					r.Lookup("shell")
				case 2:
					_, _ = r.Export(FormatMCP)
				case 3:
					_, _, _, _ = r.Prepare(Call{Name: "bash", Arguments: json.RawMessage(`{"command":"ls"}`)})
				case 4:
					r.Merge(other)
				case 5:
					_ = r.AddAlias(fmt.Sprintf("a%d", i), "bash")
					r.Names()
					r.Tools()
				}
			}
		}()
	}
	wg.Wait()
	if r.Len() != len(testTools())+8 {
		t.Errorf("Len() = %d", r.Len())
	}
}

func TestZeroRegistry(t *testing.T) {
	t.Parallel()
	var r Registry
	if _, ok := r.Lookup("bash"); ok || len(r.Names()) != 0 || len(r.Aliases()) != 0 {
		t.Fatal("zero registry not empty")
	}
	if _, _, _, err := r.Prepare(Call{Name: "bash"}); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Prepare: %v", err)
	}
	if err := r.AddAlias("sh", "bash"); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(&Tool{Name: "bash", Effects: []Effect{EffectExec}, Command: noopCommand}); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Lookup("sh"); !ok || got.Name != "bash" {
		t.Errorf("Lookup(sh) = %v %v", got, ok)
	}
	var z Registry
	z.Merge(&r)
	if !slices.Equal(z.Names(), []string{"bash"}) {
		t.Errorf("Merge into zero: %v", z.Names())
	}
}

func TestRegistryRemove(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	for _, n := range []string{"a", "python_repl", "c"} {
		if err := r.Register(&Tool{Name: n, Run: noopRun}); err != nil {
			t.Fatal(err)
		}
	}
	if !r.Remove("Python_Repl") || r.Remove("python_repl") || r.Remove("python") {
		t.Fatal("Remove")
	}
	if _, ok := r.Lookup("python"); ok {
		t.Error("alias resolves to a removed tool")
	}
	if got := r.Names(); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("names %v", got)
	}
	if err := r.Register(&Tool{Name: "python_repl", Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("python"); !ok {
		t.Error("alias does not resolve once the tool is back")
	}
}
