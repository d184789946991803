package tools

import (
	"errors"
	"strings"
	"testing"
)

// repairCases are the malformed arguments models really produce; the fuzz
// targets start from them too.
var repairCases = []struct {
	name, in, want string
}{
	{"valid unchanged", ` {"a": 1, "b": [true, null]} `, `{"a": 1, "b": [true, null]}`},
	{"valid strings untouched", `{"s": "it's \"quoted\", True, {x: 1,}"}`, `{"s": "it's \"quoted\", True, {x: 1,}"}`},
	{"trailing comma object", `{"a": 1,}`, `{"a":1}`},
	{"trailing comma array", `{"a": [1, 2,],}`, `{"a":[1,2]}`},
	{"missing comma", "{\"a\": 1\n\"b\": 2}", `{"a":1,"b":2}`},
	{"single quotes", `{'command': 'echo "hi"', 'n': 'it\'s'}`, `{"command":"echo \"hi\"","n":"it's"}`},
	{"unquoted keys", `{command: "ls -la", timeout_seconds: 5}`, `{"command":"ls -la","timeout_seconds":5}`},
	{"python literals", `{'a': True, 'b': False, 'c': None}`, `{"a":true,"b":false,"c":null}`},
	{"python dict repr", `{'code': 'print(1)\nprint(2)', 'packages': ['numpy', 'pandas',]}`, `{"code":"print(1)\nprint(2)","packages":["numpy","pandas"]}`},
	{"valid strings kept in repaired doc", `{"s": "a,}b\\n\u00e9 True", x: 1,}`, `{"s":"a,}b\\n\u00e9 True","x":1}`},
	{"markdown fence", "```json\n{\"command\": \"ls\"}\n```", `{"command":"ls"}`},
	{"fence with repairs", "Here you go:\n```json\n{command: 'ls',}\n```\nDone.", `{"command":"ls"}`},
	{"fence without language", "```\n{\"a\": 1}\n```", `{"a":1}`},
	{"prose around", `Sure! I'll run {"command": "ls"} for you.`, `{"command":"ls"}`},
	{"prose with braces before", `Use {the tool}: {"command": "ls"}`, `{"command":"ls"}`},
	{"trailing prose", `{"command": "ls"} -- this lists files`, `{"command":"ls"}`},
	{"raw newline in string", "{\"code\": \"a\nb\tc\"}", `{"code":"a\nb\tc"}`},
	{"comments", "{\n  // the command\n  \"command\": \"ls\", /* why */\n}", `{"command":"ls"}`},
	{"invalid escape kept literally", `{"p": "C:\dir", 'q': 'x'}`, `{"p":"C:\\dir","q":"x"}`},
	{"lenient numbers", `{a: +1, b: .5, c: 2.}`, `{"a":1,"b":0.5,"c":2}`},
	{"scalar", `'just text'`, `"just text"`},
	{"python None alone", `None`, `null`},
	{"nested", `{'a': {'b': [{'c': None,},],},}`, `{"a":{"b":[{"c":null}]}}`},
}

func TestRepair(t *testing.T) {
	t.Parallel()
	for _, tt := range repairCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Repair([]byte(tt.in))
			if err != nil {
				t.Fatalf("Repair(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Repair(%q)\n = %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestRepairErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		offset   int
		want     string
	}{
		{"missing value", `{"command": "ls", "a": ]`, 23, "invalid JSON at offset 23 near `ommand\": \"ls\", \"a\": ]`: expected a value"},
		{"short", `{"a": ]`, 6, "invalid JSON at offset 6 near `{\"a\": ]`: expected a value"},
		{"empty", "  ", 0, "empty input"},
		{"truncated object", `{"command": "rm -rf /tmp/x`, 12, "unterminated string"},
		{"unclosed", `{"command": "ls"`, 0, "'{' is never closed"},
		{"bare word value", `{"command": ls}`, 12, "expected a value"},
		{"missing colon", `{"a" 1}`, 5, "expected ':'"},
		{"two objects", `{"a": 1} {"b": 2}`, 9, "unexpected data after the value"},
		{"no object in prose", `I cannot do that.`, 0, "expected a JSON object"},
		{"too deep", strings.Repeat("[", 2000), 1000, "nested too deeply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Repair([]byte(tt.in))
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SyntaxError", err)
			}
			if se.Offset != tt.offset {
				t.Errorf("offset = %d, want %d (%v)", se.Offset, tt.offset, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want %q in it", err, tt.want)
			}
		})
	}
}
