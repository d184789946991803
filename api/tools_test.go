package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestToolsFormatErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, path := range []string{"/v1/tools?format=xml", "/v1/tools/echo?format=yaml"} {
		rec := h.do("GET", path, "")
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "format") {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	rec := h.do("GET", "/v1/tools/no_such_tool", "")
	if rec.Code != 404 || decodeErr(t, rec.Body.String()).Code != CodeUnknownTool {
		t.Fatalf("unknown tool: %d %s", rec.Code, rec.Body)
	}
}

func TestToolsNilRegistry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	h.fake.Reg = nil
	rec := h.do("GET", "/v1/tools", "")
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"tools":[]}` {
		t.Fatalf("tools: %d %s", rec.Code, rec.Body)
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	needRegistry(t, h)

	rec := h.do("GET", "/v1/tools", "")
	var list struct {
		Tools []toolView `json:"tools"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || rec.Code != 200 {
		t.Fatalf("tools: %d %s %v", rec.Code, rec.Body, err)
	}
	if len(list.Tools) != 2 || list.Tools[0].Name != "echo" || !list.Tools[0].ParallelSafe || list.Tools[1].Effects[0] != "exec" {
		t.Fatalf("tools %+v", list.Tools)
	}

	rec = h.do("GET", "/v1/tools/ECHO", "")
	var one toolView
	if err := json.Unmarshal(rec.Body.Bytes(), &one); err != nil || rec.Code != 200 || one.Name != "echo" {
		t.Fatalf("tool: %d %s", rec.Code, rec.Body)
	}

	for _, f := range []string{"openai", "anthropic", "mcp"} {
		rec := h.do("GET", "/v1/tools?format="+f, "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "echo") {
			t.Fatalf("tools %s: %d %s", f, rec.Code, rec.Body)
		}
		rec = h.do("GET", "/v1/tools/shell_exec?format="+f, "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "shell_exec") || strings.HasPrefix(rec.Body.String(), "[") {
			t.Fatalf("tool %s: %d %s", f, rec.Code, rec.Body)
		}
	}
}
