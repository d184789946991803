package tools

import (
	"strings"
	"testing"
)

// TestExportIn: every format carries the description as true where the
// calls run; Export and tools without Describe keep Description.
func TestExportIn(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	for _, tl := range []*Tool{
		{Name: "placed", Description: "anywhere", Run: noopRun, Describe: func(w Where) string {
			if w.Session {
				return "in a session with " + w.Image.PackageList()
			}
			return "one-shot"
		}},
		{Name: "plain", Description: "plain", Run: noopRun},
	} {
		if err := r.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	w := Where{Session: true, Image: &ImageFacts{Packages: map[string]string{"numpy": "1.24", "b": ""}}}
	for _, f := range Formats {
		out, err := r.ExportIn(f, w)
		if err != nil || len(out) != 2 {
			t.Fatalf("%s: %v %v", f, out, err)
		}
		desc := func(m map[string]any) string {
			if fn, ok := m["function"].(map[string]any); ok {
				m = fn
			}
			s, _ := m["description"].(string)
			return s
		}
		if d := desc(out[0]); d != "in a session with b, numpy 1.24" {
			t.Errorf("%s: placed %q", f, d)
		}
		if d := desc(out[1]); d != "plain" {
			t.Errorf("%s: plain %q", f, d)
		}
		plain, _ := r.Export(f, "placed")
		if d := desc(plain[0]); d != "anywhere" {
			t.Errorf("%s: Export %q", f, d)
		}
	}
	if tl, _ := r.Lookup("placed"); !strings.HasPrefix(tl.In(Where{}).Description, "one-shot") || tl.Description != "anywhere" {
		t.Error("In changed the registered tool")
	}
}
