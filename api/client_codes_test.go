package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestClientsMapEveryErrorCode: every error code the API answers (the
// Code* constants of errors.go) has its exception class in the Python and
// the TypeScript client, so a new code is not left to the status fallback
// (a 503 store_unavailable raised as ServerError, not UnavailableError).
func TestClientsMapEveryErrorCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					c, _ := strconv.Unquote(lit.Value)
					codes = append(codes, c)
				}
			}
		}
	}
	if len(codes) < 20 {
		t.Fatalf("found %d error codes in errors.go: %v", len(codes), codes)
	}
	for file, pattern := range map[string]string{
		"../clients/python/src/sandboxd/errors.py": `(?m)^    "%s": [A-Za-z]+Error,$`,
		"../clients/typescript/src/errors.ts":      `(?m)^  %s: [A-Za-z]+Error,$`,
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range codes {
			if !regexp.MustCompile(strings.Replace(pattern, "%s", regexp.QuoteMeta(c), 1)).Match(data) {
				t.Errorf("%s: no exception class for the API's error code %q", file, c)
			}
		}
	}
}
