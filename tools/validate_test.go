package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMessagesQuoteLittle(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	long := strings.Repeat("é", 100)
	_, _, _, err := r.Prepare(Call{Name: "bash", Arguments: json.RawMessage(`{"command":"ls","` + long + `":1}`)})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems[0].Message) > 120 || !strings.Contains(ve.Problems[0].Message, `..."`) {
		t.Errorf("err = %v", err)
	}
	_, _, _, err = r.Prepare(Call{Name: strings.Repeat("x", 10000)})
	if !errors.Is(err, ErrUnknownTool) || len(err.Error()) > 300 {
		t.Errorf("err = %v", err)
	}
}

func TestPlural(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{{1, "item", "1 item"}, {0, "item", "0 items"}, {2, "property", "2 properties"}} {
		if got := plural(tc.n, tc.noun); got != tc.want {
			t.Errorf("plural(%d, %s) = %q", tc.n, tc.noun, got)
		}
	}
}

func TestKeywordMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schema, value, want string
	}{
		{`{"const":"a"}`, `"b"`, `must be "a"`},
		{`{"enum":[1]}`, `2`, `must be 1`},
		{`{"type":"string","pattern":"^[a-z]+$"}`, `"A"`, `must match the pattern "^[a-z]+$"`},
		{`{"exclusiveMinimum":0}`, `0`, `must be > 0`},
		{`{"exclusiveMaximum":1.5}`, `2`, `must be < 1.5`},
		{`{"maximum":10}`, `11`, `must be <= 10`},
		{`{"multipleOf":0.01}`, `0.001`, `must be a multiple of 0.01`},
		{`{"type":"array","uniqueItems":true}`, `[1,1]`, `items 0 and 1 are equal; items must be unique`},
		{`{"type":"array","minItems":2}`, `[1]`, `must have at least 2 items`},
		{`{"type":"object","minProperties":1}`, `{}`, `must have at least 1 property`},
		{`{"type":"object","maxProperties":1}`, `{"a":1,"b":2}`, `must have at most 1 property`},
		{`{"type":"object","propertyNames":{"maxLength":1}}`, `{"ab":1}`, `property name "ab" is not allowed`},
		{`{"type":"object","dependentRequired":{"a":["b"]}}`, `{"a":1}`, `missing property "b", required when "a" is set`},
		{`{"type":"array","contains":{"type":"string"}}`, `[1]`, `must contain an item matching the schema`},
		{`{"oneOf":[{"type":"number"},{"type":"integer"}]}`, `1`, `matches more than one of the allowed shapes (oneOf)`},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			t.Parallel()
			r := NewRegistry()
			if err := r.Register(&Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"v":` + tt.schema + `}}`), Run: noopRun}); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := r.Prepare(Call{Name: "t", Arguments: json.RawMessage(`{"v":` + tt.value + `}`)})
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v", err)
			}
			var msgs []string
			for _, p := range ve.Problems {
				if p.Field != "/v" && !strings.HasPrefix(p.Field, "/v/") {
					t.Errorf("field = %q", p.Field)
				}
				msgs = append(msgs, p.Message)
			}
			if len(msgs) != 1 || msgs[0] != tt.want {
				t.Errorf("messages = %q, want %q", msgs, tt.want)
			}
		})
	}
}
