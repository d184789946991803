package tools

import (
	"context"
	"encoding/json"
	"testing"
)

const bashSchema = `{
	"type": "object",
	"properties": {
		"command": {"type": "string", "minLength": 1, "description": "The command to run."},
		"timeout_seconds": {"type": "number", "minimum": 1, "maximum": 600}
	},
	"required": ["command"],
	"additionalProperties": false
}`

const pythonSchema = `{
	"type": "object",
	"properties": {
		"code": {"type": "string"},
		"mode": {"enum": ["exec", "eval"]},
		"packages": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
	},
	"required": ["code"],
	"additionalProperties": false
}`

const readFileSchema = `{
	"type": "object",
	"properties": {
		"path": {"type": "string"},
		"offset": {"type": "integer", "minimum": 0},
		"limit": {"type": "integer", "minimum": 1}
	},
	"required": ["path"]
}`

func noopCommand(map[string]any) (Command, error) { return Command{Args: []string{"true"}}, nil }

func noopRun(context.Context, Env, map[string]any) (Result, error) { return Result{OK: true}, nil }

// testTools is a realistic set: two sandboxed tools, an in-process file
// tool, one with a wrapped (string) input schema and an http tool.
func testTools() []*Tool {
	return []*Tool{
		{Name: "bash", Description: "Run a shell command.\nThe workspace is the current directory.", InputSchema: json.RawMessage(bashSchema),
			Effects: []Effect{EffectExec, EffectFileRead, EffectFileWrite}, Command: noopCommand},
		{Name: "python_repl", InputSchema: json.RawMessage(pythonSchema),
			Effects: []Effect{EffectExec}, Command: noopCommand},
		{Name: "read_file", Description: "Read a file.", InputSchema: json.RawMessage(readFileSchema),
			Effects: []Effect{EffectFileRead}, ParallelSafe: true, Run: noopRun},
		{Name: "echo", Description: "Echo a string.", InputSchema: json.RawMessage(`{"type":"string","maxLength":20}`), Run: noopRun},
		{Name: "http_get", Description: "GET a URL.", InputSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"status":{"type":"integer"}}}`),
			Effects:      []Effect{EffectHTTP}, Run: noopRun},
	}
}

func testRegistry(t testing.TB) *Registry {
	t.Helper()
	r := NewRegistry()
	for _, tool := range testTools() {
		if err := r.Register(tool); err != nil {
			t.Fatalf("Register(%s): %v", tool.Name, err)
		}
	}
	return r
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// canonical re-encodes JSON with sorted keys so documents compare by value.
func canonical(t testing.TB, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", s, err)
	}
	return mustJSON(t, v)
}
