package tools

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var parseCallCases = []struct {
	name, in           string
	wantID, wantName   string
	wantArgs           string
	wantErr, wantField string
}{
	{name: "plain", in: `{"id":"c1","name":"bash","arguments":{"command":"ls"}}`, wantID: "c1", wantName: "bash", wantArgs: `{"command":"ls"}`},
	{name: "plain string arguments", in: `{"name":"bash","arguments":"{\"command\":\"ls\"}"}`, wantName: "bash", wantArgs: `"{\"command\":\"ls\"}"`},
	{name: "openai", in: `{"id":"call_abc","type":"function","function":{"name":"bash","arguments":"{\"command\": \"ls\"}"}}`,
		wantID: "call_abc", wantName: "bash", wantArgs: `"{\"command\": \"ls\"}"`},
	{name: "openai responses", in: `{"type":"function_call","id":"fc_1","call_id":"call_9","name":"bash","arguments":"{}"}`,
		wantID: "call_9", wantName: "bash", wantArgs: `"{}"`},
	{name: "anthropic", in: `{"type":"tool_use","id":"toolu_01","name":"read_file","input":{"path":"a.txt"}}`,
		wantID: "toolu_01", wantName: "read_file", wantArgs: `{"path":"a.txt"}`},
	{name: "mcp params", in: `{"name":"read_file","arguments":{"path":"a.txt"}}`, wantName: "read_file", wantArgs: `{"path":"a.txt"}`},
	{name: "mcp request", in: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}`,
		wantName: "read_file", wantArgs: `{"path":"a"}`},
	{name: "parameters key", in: `{"name":"bash","parameters":{"command":"ls"}}`, wantName: "bash", wantArgs: `{"command":"ls"}`},
	{name: "no arguments", in: `{"name":"bash"}`, wantName: "bash"},
	{name: "null arguments", in: `{"name":"bash","arguments":null}`, wantName: "bash"},
	{name: "malformed envelope", in: "```json\n{'name': 'bash', 'arguments': {'command': 'ls',},}\n```", wantName: "bash", wantArgs: `{"command":"ls"}`},
	{name: "name trimmed", in: `{"name":" bash ","arguments":{}}`, wantName: "bash", wantArgs: `{}`},
	{name: "missing name", in: `{"arguments":{}}`, wantErr: "missing tool name", wantField: "/name"},
	{name: "not an object", in: `[1,2]`, wantErr: "must be a JSON object", wantField: RootField},
	{name: "name not a string", in: `{"name":5}`, wantErr: "expected string, got number", wantField: "/name"},
	{name: "garbage", in: `not json`, wantErr: "invalid JSON at offset", wantField: RootField},
	{name: "empty", in: ``, wantErr: "empty input", wantField: RootField},
}

var callIDPattern = regexp.MustCompile(`^call_[0-9a-hjkmnp-tv-z]{26}$`)

func TestParseCall(t *testing.T) {
	t.Parallel()
	for _, tt := range parseCallCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCall([]byte(tt.in))
			if tt.wantErr != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidCall) {
					t.Fatalf("err = %v, want *ValidationError", err)
				}
				if len(ve.Problems) != 1 || ve.Problems[0].Field != tt.wantField || !strings.Contains(ve.Problems[0].Message, tt.wantErr) {
					t.Errorf("problems = %+v, want %s: %s", ve.Problems, tt.wantField, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tt.wantName || string(c.Arguments) != tt.wantArgs {
				t.Errorf("call = %s %s, want %s %s", c.Name, c.Arguments, tt.wantName, tt.wantArgs)
			}
			if tt.wantID != "" && c.ID != tt.wantID {
				t.Errorf("id = %q, want %q", c.ID, tt.wantID)
			}
			if tt.wantID == "" && !callIDPattern.MatchString(c.ID) {
				t.Errorf("generated id = %q", c.ID)
			}
		})
	}
}

func TestNewCallIDUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		id := NewCallID()
		if !callIDPattern.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}
