package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// fuzzSeeds are malformed arguments as models write them.
var fuzzSeeds = []string{
	`{"command": "ls -la", "timeout_seconds": 30}`,
	`{"command": "ls",}`,
	`{'command': 'ls', 'timeout_seconds': None}`,
	`{command: "ls", timeout_seconds: 5}`,
	`{"a": True, "b": False}`,
	"```json\n{\"command\": \"ls\"}\n```",
	`Sure, here: {"code": "print('hi')"} done`,
	`"{\"command\": \"ls\"}"`,
	`"hello"`,
	`{"command": "ls", "a": ]`,
	`{"command": "rm -rf /tmp/x`,
	"{\"code\": \"a\nb\"}",
	`{"p": "C:\dir"}`,
	`[1, 2,]`,
	`{"a": {"b": [{"c": None,},],},}`,
	`{/* c */ "a": 1 // d` + "\n}",
	`{"x": 1e400}`,
	`{"a": .5, b: +1}`,
	``,
	`null`,
}

func FuzzRepair(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, c := range repairCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Repair(in)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(in) {
				t.Fatalf("Repair(%q) error %v (%T)", in, err, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Repair(%q) = %q, not valid JSON", in, out)
		}
		if trimmed := bytes.TrimSpace(in); json.Valid(trimmed) && !bytes.Equal(out, trimmed) {
			t.Fatalf("Repair changed valid JSON %q into %q", in, out)
		}
		again, err := Repair(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("Repair not idempotent on %q: %q, %v", out, again, err)
		}
	})
}

func FuzzParseCall(f *testing.F) {
	for _, c := range parseCallCases {
		f.Add([]byte(c.in))
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(`{"name":"bash","arguments":` + s + `}`))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseCall(in)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("ParseCall(%q) error %v (%T)", in, err, err)
			}
			return
		}
		if c.Name == "" || c.ID == "" {
			t.Fatalf("ParseCall(%q) = %+v: empty name or id", in, c)
		}
		if len(c.Arguments) > 0 && !json.Valid(c.Arguments) {
			t.Fatalf("ParseCall(%q) arguments %q not valid JSON", in, c.Arguments)
		}
	})
}

func FuzzPrepare(f *testing.F) {
	r := testRegistry(f)
	names := r.Names()
	for i, s := range fuzzSeeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Add(uint8(1), []byte(`{"code": "x", "mode": "eval", "packages": ["a"]}`))
	f.Add(uint8(2), []byte(`{"path": "a.txt", "offset": 3, "limit": 1}`))
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		name := names[int(which)%len(names)]
		c, tool, args, err := r.Prepare(Call{Name: name, Arguments: raw})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || ve.Tool != name {
				t.Fatalf("Prepare(%s, %q) error %v (%T)", name, raw, err, err)
			}
			return
		}
		if args == nil || tool == nil || tool.Name != name || c.ID == "" {
			t.Fatalf("Prepare(%s, %q) = %+v %v %v", name, raw, c, tool, args)
		}
		// The normalised arguments are valid and prepare to the same args.
		c2, _, args2, err := r.Prepare(c)
		if err != nil {
			t.Fatalf("Prepare(%s, %q) gave arguments %s that do not validate: %v", name, raw, c.Arguments, err)
		}
		if !bytes.Equal(c2.Arguments, c.Arguments) || mustJSON(t, args2) != mustJSON(t, args) {
			t.Fatalf("Prepare not stable: %s then %s", c.Arguments, c2.Arguments)
		}
	})
}
