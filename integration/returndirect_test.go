//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// finalYAML is a tool file whose result is the agent's answer (CrewAI's
// spelling of the key).
const finalYAML = `name: final_report
description: Write the final report.
input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
argv: [/bin/echo, "report: {text}"]
result_as_answer: true
`

// TestReturnDirect: a return_direct tool (a built-in marked by
// tools.return_direct, a tool file with result_as_answer) is flagged in
// sandboxd's tool shape and as x-return-direct in every export format; a
// turn whose call of it succeeds answers return_direct with its result as
// final_answer, one without such a call (or whose call failed) does not.
func TestReturnDirect(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "final.yaml"), []byte(finalYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, fmt.Sprintf("tools_dir: %s\ntools:\n  return_direct: [calculator]\n", dir))

	var own struct {
		Tools []struct {
			Name         string `json:"name"`
			ReturnDirect bool   `json:"return_direct"`
		} `json:"tools"`
	}
	if resp, data := s.do("GET", "/v1/tools", "", nil, &own); resp.StatusCode != 200 {
		t.Fatalf("tools: %d %s", resp.StatusCode, data)
	}
	direct := map[string]bool{}
	for _, tl := range own.Tools {
		direct[tl.Name] = tl.ReturnDirect
	}
	if !direct["calculator"] || !direct["final_report"] || direct["bash"] {
		t.Fatalf("return_direct in GET /v1/tools: %v", direct)
	}
	if _, ok := direct["web_search"]; ok {
		t.Error("web_search is registered without tools.web_search.backend")
	}
	for _, format := range []string{"openai", "anthropic", "mcp"} {
		var l struct {
			Tools []map[string]any `json:"tools"`
		}
		s.do("GET", "/v1/tools?format="+format, "", nil, &l)
		got := map[string]bool{}
		for _, tl := range l.Tools {
			name, _ := tl["name"].(string)
			if fn, ok := tl["function"].(map[string]any); ok {
				name, _ = fn["name"].(string)
			}
			if v, ok := tl["x-return-direct"]; ok {
				got[name] = v == true
			}
		}
		if len(got) != 2 || !got["calculator"] || !got["final_report"] {
			t.Errorf("%s export: x-return-direct on %v, want calculator and final_report only", format, got)
		}
	}

	type batch struct {
		State        string            `json:"state"`
		ReturnDirect bool              `json:"return_direct"`
		Final        *string           `json:"final_answer"`
		Messages     []json.RawMessage `json:"messages"`
		Calls        []struct {
			Tool         string `json:"tool"`
			OK           bool   `json:"ok"`
			ReturnDirect bool   `json:"return_direct"`
		} `json:"calls"`
	}
	turn := func(calls ...string) batch {
		t.Helper()
		body := `{"role":"assistant","tool_calls":[`
		for i, c := range calls {
			if i > 0 {
				body += ","
			}
			body += c
		}
		var b batch
		if resp, data := s.do("POST", "/v1/tool-calls", "", body+`]}`, &b); resp.StatusCode != 200 {
			t.Fatalf("turn: %d %s", resp.StatusCode, data)
		}
		return b
	}
	b := turn(chatCall("c1", "bash", `{"command":"echo looked"}`), chatCall("c2", "final_report", `{"text":"all done"}`))
	if !b.ReturnDirect || b.Final == nil || *b.Final != "report: all done" || len(b.Messages) != 2 {
		t.Errorf("turn with final_report: return_direct %v final %q messages %d", b.ReturnDirect, deref(b.Final), len(b.Messages))
	}
	if b.Calls[0].ReturnDirect || !b.Calls[1].ReturnDirect {
		t.Errorf("calls' return_direct: %+v", b.Calls)
	}
	if b := turn(chatCall("c1", "calculator", `{"expression":"6*7"}`)); !b.ReturnDirect || b.Final == nil || *b.Final != "42" {
		t.Errorf("turn with calculator: return_direct %v final %q", b.ReturnDirect, deref(b.Final))
	}
	if b := turn(chatCall("c1", "bash", `{"command":"echo hi"}`)); b.ReturnDirect || b.Final != nil {
		t.Errorf("turn without a return_direct tool: return_direct %v final %q", b.ReturnDirect, deref(b.Final))
	}
	if b := turn(chatCall("c1", "calculator", `{"expression":"1/0"}`)); b.ReturnDirect || b.Final != nil || b.Calls[0].OK {
		t.Errorf("a failed return_direct call: return_direct %v final %q calls %+v", b.ReturnDirect, deref(b.Final), b.Calls)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
