package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPrepareArguments(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		name, tool, args string
		want             string // compact JSON of the returned Call.Arguments
	}{
		{"object", "bash", `{"command":"ls","timeout_seconds":5}`, `{"command":"ls","timeout_seconds":5}`},
		{"no html escaping", "bash", `{"command":"ls > out && cat <in"}`, `{"command":"ls > out && cat <in"}`},
		{"json string", "bash", `"{\"command\": \"ls\"}"`, `{"command":"ls"}`},
		{"double encoded", "bash", `"\"{\\\"command\\\":\\\"ls\\\"}\""`, `{"command":"ls"}`},
		{"trailing comma", "bash", `{"command": "ls",}`, `{"command":"ls"}`},
		{"single quotes in a string", "bash", `"{'command': 'ls'}"`, `{"command":"ls"}`},
		{"python literals", "python_repl", `{'code': 'x = None', 'mode': 'exec'}`, `{"code":"x = None","mode":"exec"}`},
		{"fenced", "bash", "\"```json\\n{\\\"command\\\": \\\"ls\\\"}\\n```\"", `{"command":"ls"}`},
		{"prose", "bash", `"Sure: {\"command\": \"ls\"}"`, `{"command":"ls"}`},
		{"alias and case", "SHELL", `{"command":"ls"}`, `{"command":"ls"}`},
		{"wrapped bare string", "echo", `"hello"`, `{"input":"hello"}`},
		{"wrapped json string of a string", "echo", `"\"hello\""`, `{"input":"hello"}`},
		{"wrapped object form", "echo", `{"input":"hello"}`, `{"input":"hello"}`},
		{"wrapped not json", "echo", `"hello world"`, `{"input":"hello world"}`},
		{"big integer kept exact", "read_file", `{"path":"a","offset":12345678901234567890}`, `{"offset":12345678901234567890,"path":"a"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, tool, args, err := r.Prepare(Call{Name: tt.tool, Arguments: json.RawMessage(tt.args)})
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if got := string(c.Arguments); got != tt.want {
				t.Errorf("arguments = %s, want %s", got, tt.want)
			}
			if c.Name != tool.Name {
				t.Errorf("call name %q, tool %q", c.Name, tool.Name)
			}
			if !callIDPattern.MatchString(c.ID) {
				t.Errorf("id = %q", c.ID)
			}
			var want map[string]any
			_ = json.Unmarshal(c.Arguments, &want)
			if mustJSON(t, args) != mustJSON(t, want) {
				t.Errorf("args = %v, want %v", args, want)
			}
		})
	}
}

func TestPrepareKeepsIDAndCanonicalName(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	c, tool, args, err := r.Prepare(Call{ID: "toolu_1", Name: "File_Read", Arguments: json.RawMessage(`{"path":"x","limit":10}`)})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "toolu_1" || c.Name != "read_file" || tool.Name != "read_file" {
		t.Errorf("call = %+v", c)
	}
	if _, ok := args["limit"].(float64); !ok {
		t.Errorf("numbers must be float64, got %T", args["limit"])
	}
	_, _, args, err = r.Prepare(Call{Name: "bash", Arguments: json.RawMessage(`{"command":"ls"}`)})
	if err != nil || len(args) != 1 || args["command"] != "ls" {
		t.Errorf("Prepare = %v, %v", args, err)
	}
	if _, _, args, err = r.Prepare(Call{Name: "python_repl", Arguments: json.RawMessage(`  `)}); err == nil {
		t.Errorf("empty arguments for a tool with required code: args %v", args)
	}
	if _, _, args, err = r.Prepare(Call{Name: "http_get"}); err == nil {
		t.Errorf("nil arguments passed validation: %v", args)
	}
}

func TestPrepareEmptyArguments(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Register(&Tool{Name: "now", Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{``, `null`, `""`, `"  "`, `{}`, `"{}"`, `"null"`} {
		c, _, args, err := r.Prepare(Call{Name: "now", Arguments: json.RawMessage(raw)})
		if err != nil || args == nil || len(args) != 0 || string(c.Arguments) != `{}` {
			t.Errorf("Prepare(%q) = %s %v %v, want {}", raw, c.Arguments, args, err)
		}
	}
}

func TestPrepareProblems(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		name, tool, args string
		want             []Problem
	}{
		{"wrong type", "bash", `{"command":"ls","timeout_seconds":"30"}`,
			[]Problem{{"/timeout_seconds", "expected number, got string"}}},
		{"missing required", "python_repl", `{}`,
			[]Problem{{RootField, `missing required property "code"`}}},
		{"additional properties sorted", "bash", `{"command":"ls","zed":1,"foo":2}`,
			[]Problem{{RootField, `additional property "foo" is not allowed`}, {RootField, `additional property "zed" is not allowed`}}},
		{"several, sorted by field", "python_repl", `{"mode":"run","packages":["a",2,"c","d"]}`,
			[]Problem{
				{RootField, `missing required property "code"`},
				{"/mode", `must be one of "exec", "eval"`},
				{"/packages", "must have at most 3 items"},
				{"/packages/1", "expected string, got number"},
			}},
		{"bounds", "bash", `{"command":"","timeout_seconds":0}`,
			[]Problem{{"/command", "must be at least 1 character long"}, {"/timeout_seconds", "must be >= 1"}}},
		{"integer", "read_file", `{"path":"a","offset":1.5}`,
			[]Problem{{"/offset", "expected integer, got number"}}},
		{"not an object", "bash", `[1]`,
			[]Problem{{RootField, "expected object, got array"}}},
		{"string not an object", "bash", `"ls -la"`,
			[]Problem{{RootField, "invalid JSON at offset 0 near `ls -la`: expected a JSON object (in the arguments string)"}}},
		{"unrepairable", "bash", `{"command": "ls", "a": ]`,
			[]Problem{{RootField, "invalid JSON at offset 23 near `ommand\": \"ls\", \"a\": ]`: expected a value"}}},
		{"wrapped value checked", "echo", `"this string is far too long for echo"`,
			[]Problem{{"/input", "must be at most 20 characters long"}}},
		{"number out of float64 range", "bash", `{"command":"ls","timeout_seconds":1e400}`,
			[]Problem{{"/timeout_seconds", "must be <= 600"}}},
		{"missing url", "http_get", ``,
			[]Problem{{RootField, `missing required property "url"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, args, err := r.Prepare(Call{Name: tt.tool, Arguments: json.RawMessage(tt.args)})
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v (args %v), want *ValidationError", err, args)
			}
			if !errors.Is(err, ErrInvalidCall) {
				t.Error("ValidationError does not match ErrInvalidCall")
			}
			if tool, _ := r.Lookup(tt.tool); ve.Tool != tool.Name {
				t.Errorf("Tool = %q", ve.Tool)
			}
			if mustJSON(t, ve.Problems) != mustJSON(t, tt.want) {
				t.Errorf("problems =\n%s\nwant\n%s", mustJSON(t, ve.Problems), mustJSON(t, tt.want))
			}
		})
	}
}

func TestPrepareOutOfRangeNumber(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Register(&Tool{Name: "n", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"}}}`), Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := r.Prepare(Call{Name: "n", Arguments: json.RawMessage(`{"x":-1e999}`)})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Field != "/x" || !strings.Contains(ve.Problems[0].Message, "out of range") {
		t.Errorf("err = %v", err)
	}
}

func TestPrepareMergesBranchTypeErrors(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	schema := `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"}]},"w":{"not":{"const":1}},"k":false}}`
	if err := r.Register(&Tool{Name: "t", InputSchema: json.RawMessage(schema), Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := r.Prepare(Call{Name: "t", Arguments: json.RawMessage(`{"v":true,"w":1,"k":0}`)})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v", err)
	}
	want := []Problem{{"/k", "is not allowed"}, {"/v", "expected string or integer, got boolean"}, {"/w", `must not match the schema in "not"`}}
	if mustJSON(t, ve.Problems) != mustJSON(t, want) {
		t.Errorf("problems = %s", mustJSON(t, ve.Problems))
	}
	if want := `invalid arguments for t: /k: is not allowed; /v: expected string or integer, got boolean; /w: must not match the schema in "not"`; err.Error() != want {
		t.Errorf("Error() = %s", err)
	}
}

func TestProblemsCapped(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Register(&Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`), Run: noopRun}); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("{")
	for i := range 30 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1`)
	}
	b.WriteString("}")
	_, _, _, err := r.Prepare(Call{Name: "t", Arguments: json.RawMessage(b.String())})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != maxProblems || ve.Problems[maxProblems-1].Message != "and 11 more problems" {
		t.Errorf("err = %v", err)
	}
}
