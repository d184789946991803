package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFileOps(t *testing.T) {
	t.Parallel()
	c, root := startServer(t, ServerOptions{})
	ctx := testCtx(t, 20*time.Second)

	if err := c.WriteFile(ctx, "a/b/c.txt", []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "a/b/c.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("on disk: %v %v", fi, err)
	}
	if err := c.WriteFile(ctx, "a/b/c.txt", []byte("hi"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadFile(ctx, "a/b/c.txt", 0)
	if err != nil || string(got) != "hi" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if got, err := c.ReadFile(ctx, filepath.Join(root, "a/b/c.txt"), 0); err != nil || string(got) != "hi" {
		t.Errorf("absolute path inside root: %q, %v", got, err)
	}
	if err := c.WriteFile(ctx, "empty", nil, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ReadFile(ctx, "empty", 0); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty file: %q %v", got, err)
	}
	fi, err := c.Stat(ctx, "a/b/c.txt")
	if err != nil || fi.Name != "c.txt" || fi.Size != 2 || fi.Mode.Perm() != 0o640 || fi.IsDir || fi.ModTime.IsZero() {
		t.Errorf("Stat = %+v, %v", fi, err)
	}
	list, err := c.ListDir(ctx, "")
	if err != nil || len(list) != 2 || list[0].Name != "a" || !list[0].IsDir || list[1].Name != "empty" {
		t.Errorf("ListDir = %+v, %v", list, err)
	}
	tree, err := c.ListTree(ctx, "")
	var names []string
	for _, f := range tree {
		names = append(names, f.Name)
	}
	if err != nil || strings.Join(names, ",") != "a,a/b,a/b/c.txt,empty" || !tree[1].IsDir || tree[2].Size != 2 || tree[2].Mode.Perm() != 0o640 {
		t.Errorf("ListTree = %+v, %v", tree, err)
	}
	if sub, err := c.ListTree(ctx, "a"); err != nil || len(sub) != 2 || sub[0].Name != "b" || sub[1].Name != "b/c.txt" {
		t.Errorf("ListTree(a) = %+v, %v", sub, err)
	}
	if _, err := c.ListTree(ctx, "a/b/c.txt"); err == nil {
		t.Error("ListTree of a file succeeded")
	}
	if _, err := c.ReadFile(ctx, "a/b/c.txt", 1); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("over max bytes: %v", err)
	}
	if _, err := c.ReadFile(ctx, "a", 0); err == nil {
		t.Error("reading a directory succeeded")
	}
	if _, err := c.ReadFile(ctx, "missing", 0); err == nil {
		t.Error("reading a missing file succeeded")
	}
	if err := c.Remove(ctx, "a", false); err == nil {
		t.Error("non-recursive remove of a non-empty dir succeeded")
	}
	if err := c.Remove(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a still there: %v", err)
	}
	if err := c.Remove(ctx, "", true); err == nil {
		t.Error("removing the root succeeded")
	}
	if err := c.Remove(ctx, "empty", false); err != nil {
		t.Error(err)
	}
}

func TestFileOpsConfined(t *testing.T) {
	t.Parallel()
	c, root := startServer(t, ServerOptions{})
	ctx := testCtx(t, 20*time.Second)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "passwd")); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, outside)
	escapes := []string{
		"../secret",
		rel + "/secret",
		"a/../../secret",
		"/etc/passwd",
		filepath.Join(outside, "secret"),
		"link/secret",
		"passwd",
		"x\x00y",
	}
	for _, p := range escapes {
		if b, err := c.ReadFile(ctx, p, 0); err == nil {
			t.Errorf("ReadFile(%q) = %q, want refusal", p, b)
		}
		if err := c.WriteFile(ctx, p, []byte("x"), 0); err == nil {
			t.Errorf("WriteFile(%q) succeeded", p)
		}
		if _, err := c.ListDir(ctx, p); err == nil {
			t.Errorf("ListDir(%q) succeeded", p)
		}
		if _, err := c.ListTree(ctx, p); err == nil {
			t.Errorf("ListTree(%q) succeeded", p)
		}
	}
	// From the root the escaping symlinks are listed, not followed.
	tree, err := c.ListTree(ctx, "")
	if err != nil || len(tree) != 2 || tree[0].Name != "link" || tree[0].IsDir || tree[1].Name != "passwd" {
		t.Errorf("ListTree with escaping symlinks = %+v, %v", tree, err)
	}
	if err := c.WriteFile(ctx, "link/new/file", []byte("x"), 0); err == nil {
		t.Error("mkdir -p through an escaping symlink succeeded")
	}
	if err := c.Remove(ctx, "link/secret", false); err == nil {
		t.Error("remove through an escaping symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("outside file touched: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside dir changed: %v", entries)
	}
	// The symlink itself can be inspected and removed.
	if fi, err := c.Stat(ctx, "link"); err != nil || fi.Mode&os.ModeSymlink == 0 {
		t.Errorf("Stat(link) = %+v %v", fi, err)
	}
}

func TestFileOpsWithoutRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := newServer(ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if f := s.fileOp(frame{Type: typeReadFile, Path: dir}); f.Type != typeError {
		t.Errorf("file op without root: %+v", f)
	}
}

// TestCodeUserOwnsWhatTheAgentMakes: with ServerOptions.CodeUser the
// files and directories write_file creates belong to the code's user
// (directories that existed keep their owner), and processes run as it
// with no supplementary groups.
func TestCodeUserOwnsWhatTheAgentMakes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (chown, switching users)")
	}
	t.Parallel()
	user := &User{UID: 12345, GID: 23456}
	c, root := startServer(t, ServerOptions{CodeUser: user})
	for d := root; d != "/"; d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			os.Chmod(d, 0o755) // the code user chdirs into the root
		}
	}
	ctx := testCtx(t, 20*time.Second)
	if err := os.Mkdir(filepath.Join(root, "host"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "host/new/deeper/f.txt", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "top.txt", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]uint32{
		"host":                  {0, 0},
		"host/new":              {user.UID, user.GID},
		"host/new/deeper":       {user.UID, user.GID},
		"host/new/deeper/f.txt": {user.UID, user.GID},
		"top.txt":               {user.UID, user.GID},
	} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s: owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want[0], want[1])
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "host/new/deeper/f.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	res, err := c.Exec(ctx, ExecRequest{Args: []string{"grep", "-E", "^(Uid|Gid|Groups|CapEff|CapPrm):", "/proc/self/status"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "Uid:\t12345\t12345\t12345\t12345\nGid:\t23456\t23456\t23456\t23456\nGroups:\t\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
	if got := strings.ReplaceAll(string(res.Stdout), "\t \n", "\t\n"); got != want {
		t.Errorf("process status:\n%s\nwant:\n%s", got, want)
	}
	if _, err := os.Stat(testPython); err == nil {
		r, err := c.REPL(ctx, REPLRequest{Code: "import os; (os.getuid(), os.getgid(), os.getgroups())"}, nil)
		if err != nil || r.Value != "(12345, 23456, [])" {
			t.Errorf("REPL identity: %+v %v", r, err)
		}
	}
}
