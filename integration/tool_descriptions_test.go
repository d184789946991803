//go:build integration

package integration

import (
	"strings"
	"testing"
)

// sentenceAfter is the text after prefix up to the end of its sentence
// (". " or the final "."; versions have dots), "" without prefix.
func sentenceAfter(s, prefix string) string {
	_, rest, ok := strings.Cut(s, prefix)
	if !ok {
		return ""
	}
	if i := strings.Index(rest, ". "); i >= 0 {
		return rest[:i]
	}
	return strings.TrimSuffix(rest, ".")
}

// TestToolDescriptionsTrue: python_repl's description as exported says
// what is true where the caller's calls run: one-shot (a fresh
// interpreter each call) or in the session named by ?session_id= (one
// interpreter, globals persist), in every export format, and the
// packages it names as installed import in a call while those it names
// as missing do not, on the local runner (the host's Python) and in the
// Docker image.
func TestToolDescriptionsTrue(t *testing.T) {
	for _, rc := range []struct{ name, config string }{
		{"local", ""},
		{"docker", runtimeConfig("docker", "")},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if rc.name == "docker" {
				needDocker(t)
			}
			s := startServer(t, rc.config)
			describe := func(query string) string {
				t.Helper()
				var out struct {
					Name, Description string
					Function          struct{ Description string }
				}
				resp, data := s.do("GET", "/v1/tools/python_repl"+query, "", nil, &out)
				if resp.StatusCode != 200 {
					t.Fatalf("GET %s: %d %s", query, resp.StatusCode, data)
				}
				return out.Description + out.Function.Description
			}
			one := describe("?format=openai")
			if !strings.Contains(one, "Each call starts a fresh interpreter in a fresh sandbox") || strings.Contains(one, "This session") {
				t.Fatalf("one-shot description: %s", one)
			}
			installed := sentenceAfter(one, "with the standard library and ")
			if installed == "" {
				t.Fatalf("the description names no installed packages: %s", one)
			}
			var present, missing []string
			for _, p := range strings.Split(installed, ", ") {
				present = append(present, strings.Fields(p)[0])
			}
			if mm := sentenceAfter(one, "Not installed: "); mm != "" {
				missing = strings.Split(mm, ", ")
			}
			if !strings.Contains(strings.Join(append(present, missing...), " "), "numpy") {
				t.Fatalf("numpy neither installed nor missing: %s", one)
			}
			for _, p := range present {
				if j := s.run("", "python_repl", map[string]any{"code": "import " + p}); !j.Result.OK {
					t.Errorf("the description says %s is installed: %s %s", p, j.Result.Error, j.Result.Content)
				}
			}
			for _, p := range missing {
				if j := s.run("", "python_repl", map[string]any{"code": "import " + p}); j.Result.OK || !strings.Contains(j.Result.Error, "ModuleNotFoundError") {
					t.Errorf("the description says %s is missing: %+v", p, j.Result)
				}
			}
			if rc.name == "docker" && (len(missing) > 0 && strings.Contains(strings.Join(missing, " "), "pandas")) {
				t.Errorf("the python image has pandas; the description says: %s", one)
			}

			var ses struct{ ID string }
			if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses); resp.StatusCode != 201 {
				t.Fatalf("create session: %d %s", resp.StatusCode, data)
			}
			for _, f := range []string{"sandboxd", "openai", "anthropic", "mcp"} {
				d := describe("?format=" + f + "&session_id=" + ses.ID)
				if !strings.Contains(d, "This session keeps one interpreter") || strings.Contains(d, "fresh interpreter") || !strings.Contains(d, installed) {
					t.Errorf("format %q in a session: %s", f, d)
				}
			}
			var list struct {
				Tools []struct {
					Name        string `json:"name"`
					Description string `json:"description"`
				} `json:"tools"`
			}
			s.do("GET", "/v1/tools?format=anthropic&session_id="+ses.ID, "", nil, &list)
			found := false
			for _, tl := range list.Tools {
				if tl.Name == "python_repl" {
					found = strings.Contains(tl.Description, "This session keeps one interpreter")
				}
			}
			if !found {
				t.Errorf("the session's listing: %+v", list)
			}
			// Globals persist in the session, as it says.
			for i, code := range []string{"x = 41", "x + 1"} {
				var j jobView
				s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": code}, "session_id": ses.ID}, &j)
				if i == 1 && (j.Result == nil || j.Result.Content != "42\n") {
					t.Errorf("globals did not persist: %+v", j.Result)
				}
			}
			if resp, data := s.do("GET", "/v1/tools?session_id=ses_nosuchsession", "", nil, nil); resp.StatusCode != 404 {
				t.Errorf("an unknown session: %d %s", resp.StatusCode, data)
			}
		})
	}
}
