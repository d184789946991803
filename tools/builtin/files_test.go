package builtin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tools"
)

const secret = "TOPSECRET outside the workspace"

// newWorkspace builds:
//
//	<tmp>/outside/secret.txt          (must never be read or written)
//	<tmp>/ws/a.txt, ws/sub/b.txt, ws/bin.dat
//	ws/etc    -> /etc                 (absolute symlink)
//	ws/up     -> ..                   (the workspace's parent)
//	ws/sec    -> ../outside/secret.txt
//	ws/chain1 -> chain2 -> ../outside (a chain leading out)
//	ws/inlink -> a.txt                (inside: allowed)
func newWorkspace(t *testing.T) (ws, outside string) {
	t.Helper()
	base := t.TempDir()
	ws, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, "sub", "deep"), 0o755))
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret+"\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "a.txt"), []byte("alpha\nbeta\ngamma\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "sub", "b.txt"), []byte("Beta two\nnothing\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "sub", "deep", "c.go"), []byte("package c // beta\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "bin.dat"), []byte("beta\x00\x01\x02"), 0o644))
	must(os.Symlink("/etc", filepath.Join(ws, "etc")))
	must(os.Symlink("..", filepath.Join(ws, "up")))
	must(os.Symlink("../outside/secret.txt", filepath.Join(ws, "sec")))
	must(os.Symlink("chain2", filepath.Join(ws, "chain1")))
	must(os.Symlink("../outside", filepath.Join(ws, "chain2")))
	must(os.Symlink("a.txt", filepath.Join(ws, "inlink")))
	return ws, outside
}

func run(t *testing.T, name string, env tools.Env, args map[string]any) tools.Result {
	t.Helper()
	return runWith(t, Options{}, name, env, args)
}

func runWith(t *testing.T, o Options, name string, env tools.Env, args map[string]any) tools.Result {
	t.Helper()
	for _, tl := range Tools(o) {
		if tl.Name == name {
			r, err := tl.Run(t.Context(), env, args)
			if err != nil {
				t.Fatalf("%s returned an infrastructure error: %v", name, err)
			}
			return r
		}
	}
	t.Fatalf("no tool %q", name)
	return tools.Result{}
}

var escapePaths = []string{
	"../outside/secret.txt",
	"/etc/passwd",
	"/workspace/../outside/secret.txt",
	"etc/passwd",
	"up/outside/secret.txt",
	"sec",
	"chain1/secret.txt",
	"sub/../../outside/secret.txt",
	"/tmp",
}

func TestFileToolsRefuseEscapes(t *testing.T) {
	t.Parallel()
	ws, outside := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	type call struct {
		tool string
		args func(p string) map[string]any
	}
	calls := []call{
		{"read_file", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"file_info", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"list_dir", func(p string) map[string]any { return map[string]any{"path": p, "recursive": true} }},
		{"glob_search", func(p string) map[string]any { return map[string]any{"pattern": "**", "path": p} }},
		{"grep_search", func(p string) map[string]any { return map[string]any{"pattern": ".", "path": p} }},
		{"write_file", func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} }},
		{"write_file", func(p string) map[string]any {
			return map[string]any{"path": p + "/new.txt", "content": "pwned", "create_dirs": true}
		}},
		{"str_replace", func(p string) map[string]any {
			return map[string]any{"path": p, "old_string": "TOPSECRET", "new_string": "pwned"}
		}},
	}
	for _, c := range calls {
		for _, p := range escapePaths {
			if c.tool == "file_info" && p == "sec" {
				continue // Lstat of the link itself is inside; see TestFileInfoSymlinkOut
			}
			t.Run(c.tool+"/"+p, func(t *testing.T) {
				t.Parallel()
				r := run(t, c.tool, env, c.args(p))
				if r.OK {
					t.Fatalf("escape %q allowed: %q", p, r.Content)
				}
				if strings.Contains(r.Error+r.Content, "TOPSECRET") || strings.Contains(r.Error+r.Content, "root:") {
					t.Fatalf("leaked outside content: %q %q", r.Error, r.Content)
				}
				if r.Error == "" {
					t.Fatal("refusal without an error message")
				}
			})
		}
	}
	t.Cleanup(func() {
		b, err := os.ReadFile(filepath.Join(outside, "secret.txt"))
		if err != nil || string(b) != secret+"\n" {
			t.Errorf("outside file changed: %q %v", b, err)
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) != 1 {
			t.Errorf("files created outside the workspace: %v", entries)
		}
	})
}

func TestEscapeErrorIsClear(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	for p, want := range map[string]string{
		"../outside/secret.txt": "escapes the workspace",
		"sec":                   "escapes the workspace",
		"etc/passwd":            "escapes the workspace",
		"/etc/passwd":           "outside the workspace",
	} {
		r := run(t, "read_file", env, map[string]any{"path": p})
		if !strings.Contains(r.Error, want) {
			t.Errorf("read %s: error %q, want it to say %q", p, r.Error, want)
		}
	}
}

func TestWalksDoNotFollowLinksOut(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"list_dir", map[string]any{"recursive": true}},
		{"glob_search", map[string]any{"pattern": "**"}},
		{"glob_search", map[string]any{"pattern": "**/secret.txt"}},
		{"grep_search", map[string]any{"pattern": "TOPSECRET|root"}},
	} {
		r := run(t, c.tool, env, c.args)
		if !r.OK {
			t.Fatalf("%s: %s", c.tool, r.Error)
		}
		// Link texts may be shown; nothing behind a link leading out may.
		for _, bad := range []string{"TOPSECRET", "passwd", "hosts", "up/", "chain1/", "chain2/", "etc/"} {
			if strings.Contains(r.Content, bad) {
				t.Errorf("%s %v leaked %q:\n%s", c.tool, c.args, bad, r.Content)
			}
		}
	}
}

func TestNoWorkspace(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"read_file", "write_file", "list_dir", "glob_search", "grep_search", "file_info", "str_replace"} {
		r := run(t, name, tools.Env{}, map[string]any{"path": "a.txt", "pattern": "x", "content": "x", "old_string": "a", "new_string": "b"})
		if r.OK || !strings.Contains(r.Error, "no workspace") || len(r.Effects) != 0 {
			t.Errorf("%s without workspace: %+v", name, r)
		}
	}
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, "nonl.txt"), []byte("one\ntwo"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := tools.Env{Workspace: ws}
	tests := []struct {
		name    string
		o       Options
		args    map[string]any
		ok      bool
		content string // exact when ok
		errHas  string
	}{
		{"whole", Options{}, map[string]any{"path": "a.txt"}, true, "alpha\nbeta\ngamma\n", ""},
		{"workspace prefix", Options{}, map[string]any{"path": "/workspace/a.txt"}, true, "alpha\nbeta\ngamma\n", ""},
		{"inside symlink", Options{}, map[string]any{"path": "inlink"}, true, "alpha\nbeta\ngamma\n", ""},
		{"offset", Options{}, map[string]any{"path": "a.txt", "offset": 2.0}, true, "beta\ngamma\n", ""},
		{"offset+limit", Options{}, map[string]any{"path": "a.txt", "offset": 2.0, "limit": 1.0}, true, "beta\n\n[more lines follow; continue with offset=3]", ""},
		{"limit exact end", Options{}, map[string]any{"path": "a.txt", "limit": 3.0}, true, "alpha\nbeta\ngamma\n", ""},
		{"past end", Options{}, map[string]any{"path": "a.txt", "offset": 10.0}, true, "[a.txt has fewer than 10 lines]", ""},
		{"no final newline", Options{}, map[string]any{"path": "nonl.txt", "offset": 2.0}, true, "two", ""},
		{"truncated", Options{MaxReadBytes: 8}, map[string]any{"path": "a.txt"}, true, "alpha\nbe\n[truncated: output capped at 8 B (file is 17 B); continue with offset=2]", ""},
		{"binary", Options{}, map[string]any{"path": "bin.dat"}, false, "", "binary file (7 B"},
		{"directory", Options{}, map[string]any{"path": "sub"}, false, "", "is a directory"},
		{"missing", Options{}, map[string]any{"path": "nope.txt"}, false, "", "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runWith(t, tc.o, "read_file", env, tc.args)
			if r.OK != tc.ok {
				t.Fatalf("ok=%v err=%q content=%q", r.OK, r.Error, r.Content)
			}
			if tc.ok && r.Content != tc.content {
				t.Errorf("content %q, want %q", r.Content, tc.content)
			}
			if !strings.Contains(r.Error, tc.errHas) {
				t.Errorf("error %q, want %q", r.Error, tc.errHas)
			}
			if !slices.Equal(r.Effects, []tools.Effect{tools.EffectFileRead}) {
				t.Errorf("effects %v", r.Effects)
			}
		})
	}
}

func TestReadFileLongLine(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	long := strings.Repeat("x", 200<<10) + "\nnext\n"
	if err := os.WriteFile(filepath.Join(ws, "long.txt"), []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, "read_file", tools.Env{Workspace: ws}, map[string]any{"path": "long.txt", "offset": 2.0})
	if r.Content != "next\n" {
		t.Errorf("line after a long line: %q", r.Content)
	}
	r = run(t, "read_file", tools.Env{Workspace: ws}, map[string]any{"path": "long.txt", "limit": 1.0})
	if len(r.Content) < 200<<10 || !strings.Contains(r.Content, "offset=2") {
		t.Errorf("long line: len %d, tail %q", len(r.Content), r.Content[len(r.Content)-60:])
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	r := run(t, "write_file", env, map[string]any{"path": "new/dir/f.txt", "content": "hello\n"})
	if !r.OK || r.Content != "wrote 6 bytes to new/dir/f.txt" || !slices.Equal(r.Effects, []tools.Effect{tools.EffectFileWrite}) {
		t.Fatalf("%+v", r)
	}
	r = run(t, "write_file", env, map[string]any{"path": "/workspace/new/dir/f.txt", "content": "more\n", "append": true})
	if !r.OK || !strings.HasPrefix(r.Content, "appended 5 bytes") {
		t.Fatalf("%+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "new/dir/f.txt")); string(b) != "hello\nmore\n" {
		t.Errorf("file %q", b)
	}
	r = run(t, "write_file", env, map[string]any{"path": "new/dir/f.txt", "content": "x"})
	if b, _ := os.ReadFile(filepath.Join(ws, "new/dir/f.txt")); !r.OK || string(b) != "x" {
		t.Errorf("overwrite: %q %+v", b, r)
	}
	r = run(t, "write_file", env, map[string]any{"path": "other/f.txt", "content": "x", "create_dirs": false})
	if r.OK || !strings.Contains(r.Error, "no such file") {
		t.Errorf("create_dirs=false: %+v", r)
	}
	r = runWith(t, Options{MaxWriteBytes: 3}, "write_file", env, map[string]any{"path": "big.txt", "content": "toolong"})
	if r.OK || !strings.Contains(r.Error, "limit") {
		t.Errorf("size cap: %+v", r)
	}
	r = run(t, "write_file", env, map[string]any{"path": "sub", "content": "x"})
	if r.OK {
		t.Errorf("wrote over a directory: %+v", r)
	}
	r = run(t, "write_file", tools.Env{Workspace: ws, ReadOnly: true}, map[string]any{"path": "ro.txt", "content": "x"})
	if r.OK || !strings.Contains(r.Error, "read-only") || len(r.Effects) != 0 {
		t.Errorf("read-only: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "ro.txt")); err == nil {
		t.Error("read-only workspace was written")
	}
}

func TestListDir(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	r := run(t, "list_dir", env, map[string]any{})
	want := strings.Join([]string{
		"./ (9 entries)",
		"a.txt  (17 bytes)",
		"bin.dat  (7 bytes)",
		"chain1 -> chain2",
		"chain2 -> ../outside",
		"etc -> /etc",
		"inlink -> a.txt",
		"sec -> ../outside/secret.txt",
		"sub/",
		"up -> ..",
	}, "\n")
	if !r.OK || r.Content != want {
		t.Errorf("list:\n%s\nwant:\n%s", r.Content, want)
	}
	r = run(t, "list_dir", env, map[string]any{"path": "sub", "recursive": true})
	want = "sub/ (3 entries)\nb.txt  (17 bytes)\ndeep/\ndeep/c.go  (18 bytes)"
	if !r.OK || r.Content != want {
		t.Errorf("recursive:\n%s\nwant:\n%s", r.Content, want)
	}
	r = run(t, "list_dir", env, map[string]any{"max_entries": 2.0})
	if !r.OK || !strings.Contains(r.Content, "[truncated at 2 entries") || strings.Count(r.Content, "\n") != 3 {
		t.Errorf("max_entries:\n%s", r.Content)
	}
	r = run(t, "list_dir", env, map[string]any{"path": "a.txt"})
	if r.OK || !strings.Contains(r.Error, "not a directory") {
		t.Errorf("file: %+v", r)
	}
}

func TestGlobSearch(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	tests := []struct {
		pattern, path, want string
	}{
		{"*.txt", "", "a.txt"},
		{"**/*.txt", "", "a.txt\nsub/b.txt"},
		{"**/*.go", "", "sub/deep/c.go"},
		{"sub/**", "", "sub/\nsub/b.txt\nsub/deep/\nsub/deep/c.go"},
		{"*/*.txt", "", "sub/b.txt"},
		{"**/*.go", "sub", "sub/deep/c.go"},
		{"*.go", "/workspace/sub/deep", "sub/deep/c.go"},
		{"[ab]*.*", "", "a.txt\nbin.dat"},
		{"*.rs", "", "no matches"},
	}
	for _, tc := range tests {
		t.Run(tc.pattern+"@"+tc.path, func(t *testing.T) {
			t.Parallel()
			args := map[string]any{"pattern": tc.pattern}
			if tc.path != "" {
				args["path"] = tc.path
			}
			r := run(t, "glob_search", env, args)
			if !r.OK || r.Content != tc.want {
				t.Errorf("got %q (%s), want %q", r.Content, r.Error, tc.want)
			}
		})
	}
	for _, bad := range []string{"[", "../*", "/etc/*"} {
		if r := run(t, "glob_search", env, map[string]any{"pattern": bad}); r.OK {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"**", "a/b/c", true},
		{"**/c", "c", true},
		{"**/c", "a/b/c", true},
		{"a/**/c", "a/c", true},
		{"a/**/c", "a/x/y/c", true},
		{"a/**/c", "b/x/c", false},
		{"*.go", "a/b.go", false},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/b/d/c", false},
		{"**/**/**/**/**/**/x", strings.Repeat("a/", 60) + "y", false},
	}
	for _, tc := range tests {
		g, err := compileGlob(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.match(tc.name); got != tc.want {
			t.Errorf("%q ~ %q = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestGrepSearch(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	tests := []struct {
		name   string
		args   map[string]any
		want   string
		errHas string
	}{
		{"basic", map[string]any{"pattern": "beta"}, "a.txt:2: beta\nsub/deep/c.go:1: package c // beta", ""},
		{"case insensitive", map[string]any{"pattern": "beta", "case_insensitive": true}, "a.txt:2: beta\nsub/b.txt:1: Beta two\nsub/deep/c.go:1: package c // beta", ""},
		{"glob by name", map[string]any{"pattern": "beta", "glob": "*.go"}, "sub/deep/c.go:1: package c // beta", ""},
		{"glob by path", map[string]any{"pattern": "(?i)beta", "glob": "sub/*.txt"}, "sub/b.txt:1: Beta two", ""},
		{"sub path", map[string]any{"pattern": "o", "path": "sub"}, "sub/b.txt:1: Beta two\nsub/b.txt:2: nothing", ""},
		{"single file", map[string]any{"pattern": "a$", "path": "a.txt"}, "a.txt:1: alpha\na.txt:2: beta\na.txt:3: gamma", ""},
		{"max matches", map[string]any{"pattern": "a", "max_matches": 1.0}, "a.txt:1: alpha\n[stopped at 1 matches; raise max_matches or narrow the search]", ""},
		{"no matches", map[string]any{"pattern": "zzz"}, "no matches", ""},
		{"bad regex", map[string]any{"pattern": "(a"}, "", "bad regular expression"},
		{"lookahead", map[string]any{"pattern": "a(?=b)"}, "", "RE2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, "grep_search", env, tc.args)
			if tc.errHas != "" {
				if r.OK || !strings.Contains(r.Error, tc.errHas) {
					t.Fatalf("want error %q, got %+v", tc.errHas, r)
				}
				return
			}
			if !r.OK || r.Content != tc.want {
				t.Errorf("got %q (%s), want %q", r.Content, r.Error, tc.want)
			}
		})
	}
}

func TestFileInfo(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	env := tools.Env{Workspace: ws}
	r := run(t, "file_info", env, map[string]any{"path": "a.txt"})
	var info map[string]any
	if err := json.Unmarshal([]byte(r.Content), &info); err != nil || !r.OK {
		t.Fatalf("%+v %v", r, err)
	}
	sum := sha256.Sum256([]byte("alpha\nbeta\ngamma\n"))
	if info["type"] != "file" || info["size"] != 17.0 || info["sha256"] != hex.EncodeToString(sum[:]) || info["is_symlink"] != false || info["mode_octal"] != "0644" {
		t.Errorf("info %v", info)
	}
	r = run(t, "file_info", env, map[string]any{"path": "inlink"})
	_ = json.Unmarshal([]byte(r.Content), &info)
	if info["is_symlink"] != true || info["type"] != "file" || info["link_target"] != "a.txt" {
		t.Errorf("inside link %v", info)
	}
	r = run(t, "file_info", env, map[string]any{"path": "sub"})
	_ = json.Unmarshal([]byte(r.Content), &info)
	if info["type"] != "dir" {
		t.Errorf("dir %v", info)
	}
}

func TestFileInfoSymlinkOut(t *testing.T) {
	t.Parallel()
	ws, _ := newWorkspace(t)
	for _, p := range []string{"sec", "etc", "up"} {
		r := run(t, "file_info", tools.Env{Workspace: ws}, map[string]any{"path": p})
		var info map[string]any
		if err := json.Unmarshal([]byte(r.Content), &info); err != nil {
			t.Fatal(err)
		}
		if info["type"] != "symlink" || info["is_symlink"] != true || !strings.Contains(info["target_error"].(string), "escapes") || info["sha256"] != nil {
			t.Errorf("%s: %v", p, info)
		}
	}
}

func TestStrReplace(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	env := tools.Env{Workspace: ws}
	f := filepath.Join(ws, "f.py")
	if err := os.WriteFile(f, []byte("a = 1\nb = 1\nc = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "str_replace", env, map[string]any{"path": "f.py", "old_string": "= 1", "new_string": "= 3"})
	if r.OK || !strings.Contains(r.Error, "found 2 times") || !slices.Equal(r.Effects, []tools.Effect{tools.EffectFileRead}) {
		t.Errorf("ambiguous: %+v", r)
	}
	r = run(t, "str_replace", env, map[string]any{"path": "f.py", "old_string": "zzz", "new_string": ""})
	if r.OK || !strings.Contains(r.Error, "not found") {
		t.Errorf("missing: %+v", r)
	}
	r = run(t, "str_replace", env, map[string]any{"path": "f.py", "old_string": "c = 2\n", "new_string": ""})
	if !r.OK || r.Content != "made 1 replacement in f.py" || !slices.Equal(r.Effects, []tools.Effect{tools.EffectFileRead, tools.EffectFileWrite}) {
		t.Errorf("once: %+v", r)
	}
	r = run(t, "str_replace", env, map[string]any{"path": "/workspace/f.py", "old_string": "= 1", "new_string": "= 42", "replace_all": true})
	if !r.OK || r.Content != "made 2 replacements in f.py" {
		t.Errorf("all: %+v", r)
	}
	b, _ := os.ReadFile(f)
	st, _ := os.Stat(f)
	if string(b) != "a = 42\nb = 42\n" || st.Mode().Perm() != 0o600 {
		t.Errorf("file %q mode %v", b, st.Mode())
	}
	r = run(t, "str_replace", tools.Env{Workspace: ws, ReadOnly: true}, map[string]any{"path": "f.py", "old_string": "a", "new_string": "b"})
	if r.OK || !strings.Contains(r.Error, "read-only") {
		t.Errorf("read-only: %+v", r)
	}
}
