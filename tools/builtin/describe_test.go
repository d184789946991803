package builtin

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
)

// TestPythonDescribe: python_repl's description says what is true where
// its calls run: a session's persisting interpreter, a one-shot's fresh
// sandbox, the image's packages and only what the probe found.
func TestPythonDescribe(t *testing.T) {
	t.Parallel()
	facts := &tools.ImageFacts{Python: "3.11.2", Packages: map[string]string{"numpy": "1.24.2", "matplotlib": ""}, Missing: []string{"pandas"}}
	for _, tc := range []struct {
		name      string
		w         tools.Where
		want, not []string
	}{
		{"anywhere", tools.Where{}, []string{"In a session, calls share one interpreter", "outside a session each call starts a fresh interpreter",
			"Only the standard library is guaranteed"}, []string{"This session", "numpy"}},
		{"session", tools.Where{Session: true, Image: facts}, []string{"This session keeps one interpreter", "variables, functions and imports of earlier calls persist",
			"Python 3.11.2 with the standard library and matplotlib, numpy 1.24.2.", "Not installed: pandas."}, []string{"fresh interpreter", "guaranteed"}},
		{"one-shot", tools.Where{OneShot: true, Image: facts}, []string{"Each call starts a fresh interpreter in a fresh sandbox", "nothing, not even files"},
			[]string{"This session", "persist between calls"}},
		{"one-shot, image unknown", tools.Where{OneShot: true}, []string{"Each call starts a fresh interpreter", "Only the standard library is guaranteed"}, nil},
		{"no python", tools.Where{Session: true, Image: &tools.ImageFacts{}}, []string{"Python could not be found"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := pythonDescribe(tc.w)
			for _, s := range tc.want {
				if !strings.Contains(d, s) {
					t.Errorf("description lacks %q:\n%s", s, d)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(d, s) {
					t.Errorf("description has %q:\n%s", s, d)
				}
			}
		})
	}
	py := toolByName(t, "python_repl")
	if py.Description != pythonDescribe(tools.Where{}) || py.DescriptionIn(tools.Where{Session: true}) == py.Description {
		t.Errorf("Description %q", py.Description)
	}
}

// FuzzExceptionLine: the exception line is read from the code's stderr
// (anything the code printed): never a panic, one line, bounded, valid
// UTF-8, and only after a traceback of a cell.
func FuzzExceptionLine(f *testing.F) {
	f.Add("Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nZeroDivisionError: division by zero\n")
	f.Add("  File \"<cell-3>\", line 1\n    def (:\n        ^\nSyntaxError: invalid syntax\n")
	f.Add("no traceback\n")
	f.Add("  File \"<cell\xff")
	f.Fuzz(func(t *testing.T, stderr string) {
		line := exceptionLine(stderr)
		if line == "" {
			return
		}
		if strings.Contains(line, "\n") || len(line) > maxExceptionLine+4 || !utf8.ValidString(line) && utf8.ValidString(stderr) {
			t.Fatalf("exception line %q", line)
		}
		if !strings.Contains(stderr, "  File \"<cell") {
			t.Fatalf("a line %q without a traceback", line)
		}
	})
}
