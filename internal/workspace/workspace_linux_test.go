package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workspace filesystems need root")
	}
}

func newManager(t testing.TB) *Manager {
	t.Helper()
	needRoot(t)
	m, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := m.Cleanup(); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	return m
}

// mountLine is dir's line of /proc/self/mountinfo, "" when not mounted.
func mountLine(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && unescapeMount(f[4]) == dir {
			return l
		}
	}
	return ""
}

// loopsUnder lists the loop devices whose image lives under root.
func loopsUnder(root string) []string {
	var out []string
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range ents {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), root+"/") {
			out = append(out, p+": "+strings.TrimSpace(string(b)))
		}
	}
	return out
}

func hostFree(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

func TestLimitsEffective(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want Limits
	}{
		{Limits{}, Limits{DefaultBytes, DefaultInodes}},
		{Limits{Bytes: 16 << 20}, Limits{16 << 20, 4096}},
		{Limits{Bytes: 64 << 20, Inodes: 1000}, Limits{64 << 20, 1000}},
		{Limits{Inodes: 1 << 30}, Limits{DefaultBytes, DefaultBytes / BytesPerInode}},
	} {
		if got := tc.in.Effective(); got != tc.want {
			t.Errorf("%+v.Effective() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []Limits{{Bytes: -1}, {Inodes: -1}, {Bytes: MinBytes - 1}, {Inodes: MinInodes - 1}} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v.Check() = nil, want an error", bad)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`/a/b`: "/a/b", `/a\040b`: "/a b", `/a\011\012\134`: "/a\t\n\\", `/a\04`: `/a\04`, `/a\999`: `/a\999`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
	points, err := mountPoints(strings.NewReader("22 1 0:21 / /proc rw - proc proc rw\n" +
		`30 22 7:1 / /x\040y rw,nosuid - ext4 /dev/loop1 rw` + "\n"))
	if err != nil || len(points) != 2 || points[1] != "/x y" {
		t.Fatalf("mountPoints = %q, %v", points, err)
	}
}

// TestBounded fills a workspace with bytes and then with files: both end
// in ENOSPC at the limit, the host's free space moves by no more than the
// limit, and Release leaves no mount, loop device or directory.
func TestBounded(t *testing.T) {
	m := newManager(t)
	dir := filepath.Join(m.Root(), "sessions", "s1")
	l := Limits{Bytes: 32 << 20, Inodes: 512}
	before := hostFree(t, m.Root())
	w, err := m.Create(t.Context(), dir, l, false)
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir != dir || w.View != dir {
		t.Fatalf("Dir %q View %q, want both %q", w.Dir, w.View, dir)
	}
	line := mountLine(t, dir)
	if line == "" {
		t.Fatalf("%s is not mounted", dir)
	}
	opts := strings.Fields(line)[5]
	for _, want := range []string{"rw", "nosuid", "nodev"} {
		if !strings.Contains(","+opts+",", ","+want+",") {
			t.Errorf("mount options %q lack %s", opts, want)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if size := int64(st.Blocks) * st.Bsize; size > l.Bytes || size < l.Bytes*9/10 {
		t.Errorf("filesystem size %d, want about %d", size, l.Bytes)
	}
	if st.Files != uint64(l.Inodes) {
		t.Errorf("filesystem has %d inodes, want %d", st.Files, l.Inodes)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s := fi.Sys().(*syscall.Stat_t); s.Uid != 65534 || s.Gid != 65534 {
		t.Errorf("workspace root owned by %d:%d, want 65534:65534", s.Uid, s.Gid)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("fresh workspace holds %v", ents)
	}
	if n := len(loopsUnder(m.Root())); n != 1 {
		t.Errorf("%d loop devices for one workspace: %v", n, loopsUnder(m.Root()))
	}

	// Bytes: root writes too (no reserved blocks), and stops at ENOSPC.
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("write after %d bytes: %v, want ENOSPC", written, err)
			}
			break
		}
		if written > 2*l.Bytes {
			t.Fatalf("wrote %d bytes into a %d byte workspace", written, l.Bytes)
		}
	}
	f.Close()
	if written < l.Bytes*8/10 {
		t.Errorf("ENOSPC after %d bytes of a %d byte workspace", written, l.Bytes)
	}
	used := before - hostFree(t, m.Root())
	t.Logf("ENOSPC after %d bytes; the host's free space fell by %d", written, used)
	// Others on the host write meanwhile (go test runs packages in
	// parallel): a margin, as in runnertest's DiskLimits.
	if used > l.Bytes+(64<<20) {
		t.Errorf("the host lost %d bytes to a %d byte workspace", used, l.Bytes)
	}
	// Deleting gives the blocks back to the host (discard punches holes).
	if err := os.Remove(filepath.Join(dir, "big")); err != nil {
		t.Fatal(err)
	}

	// Inodes.
	files := 0
	for ; ; files++ {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(files)))
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("create file %d: %v, want ENOSPC", files, err)
			}
			break
		}
		f.Close()
		if files > int(l.Inodes) {
			t.Fatalf("created %d files in a workspace of %d inodes", files, l.Inodes)
		}
	}
	t.Logf("ENOSPC after %d files (%d inodes)", files, l.Inodes)
	if files < int(l.Inodes)-16 {
		t.Errorf("ENOSPC after %d files of %d inodes", files, l.Inodes)
	}

	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if line := mountLine(t, dir); line != "" {
		t.Errorf("still mounted after Release: %s", line)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace dir after Release: %v", err)
	}
	waitNoLoops(t, m.Root())
	if m.Live() != 0 {
		t.Errorf("Live() = %d after Release", m.Live())
	}
}

// waitNoLoops waits for autoclear (it runs when the last opener goes, which
// may be a moment after the unmount).
func waitNoLoops(t testing.TB, root string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(loopsUnder(root)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("loop devices left: %v", loopsUnder(root))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReadOnlyView(t *testing.T) {
	m := newManager(t)
	dir := filepath.Join(m.Root(), "ro")
	w, err := m.Create(t.Context(), dir, Limits{Bytes: MinBytes}, true)
	if err != nil {
		t.Fatal(err)
	}
	if w.View == w.Dir {
		t.Fatal("no read-only view")
	}
	opts := strings.Fields(mountLine(t, w.View))[5]
	for _, want := range []string{"ro", "nosuid", "nodev"} {
		if !strings.Contains(","+opts+",", ","+want+",") {
			t.Errorf("view mount options %q lack %s", opts, want)
		}
	}
	if err := os.WriteFile(filepath.Join(w.Dir, "a"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(w.View, "a")); err != nil || string(b) != "x" {
		t.Errorf("view reads %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(w.View, "b"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write into the view: %v, want EROFS", err)
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{w.Dir, w.View} {
		if mountLine(t, d) != "" {
			t.Errorf("%s still mounted", d)
		}
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Release: %v", d, err)
		}
	}
	waitNoLoops(t, m.Root())
}

func TestPlain(t *testing.T) {
	t.Parallel()
	m, err := New(Options{Root: t.TempDir(), Plain: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Create(t.Context(), filepath.Join(m.Root(), "x"), Limits{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if w.View != w.Dir || mountLine(t, w.Dir) != "" {
		t.Errorf("plain workspace %+v is mounted or has a view", w)
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Release: %v", err)
	}
	if _, err := m.Create(t.Context(), "/elsewhere", Limits{}, false); err == nil {
		t.Error("Create outside Root succeeded")
	}
}

// TestCreateFailsClean: a filesystem mke2fs cannot make leaves nothing.
func TestCreateFailsClean(t *testing.T) {
	m := newManager(t)
	dir := filepath.Join(m.Root(), "bad")
	// More inodes than a 16 MiB filesystem can index is capped, not an
	// error; a cancelled context is.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Create(ctx, dir, Limits{Bytes: MinBytes}, true); err == nil {
		t.Fatal("Create with a cancelled context succeeded")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir after a failed Create: %v", err)
	}
	waitNoLoops(t, m.Root())
}

// crashEnv makes the test binary a process that creates workspaces under
// its value, prints "ready" and waits to be killed.
const crashEnv = "SANDBOXD_WORKSPACE_CRASH_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(crashEnv); root != "" {
		os.Exit(crashChild(root))
	}
	os.Exit(m.Run())
}

func crashChild(root string) int {
	m, err := New(Options{Root: root})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for i, ro := range []bool{false, true, false} {
		if _, err := m.Create(context.Background(), filepath.Join(root, "sessions", "s"+strconv.Itoa(i)), Limits{Bytes: MinBytes}, ro); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("ready")
	c := make(chan os.Signal, 1)
	signal.Notify(c)
	for range c {
	}
	return 0
}

// TestCleanupAfterKill: a process that made workspaces is killed with
// SIGKILL; its mounts stay. Cleanup of a Manager on its Root removes them
// (and the loop devices go), while another Manager's live workspaces, on
// another Root, are untouched.
func TestCleanupAfterKill(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	root := filepath.Join(base, "a")
	other := newManager(t) // another instance, alive
	ow, err := other.Create(t.Context(), filepath.Join(other.Root(), "keep"), Limits{Bytes: MinBytes}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ow.Release()
	// A root that is a prefix of this one must not match either.
	prefix, err := New(Options{Root: root + "x"})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := prefix.Create(t.Context(), filepath.Join(prefix.Root(), "keep"), Limits{Bytes: MinBytes}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Release()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "ready") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %s", buf[:n])
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, s := range []string{"s0", "s1", "s1.ro", "s2"} {
		if mountLine(t, filepath.Join(root, "sessions", s)) == "" {
			t.Fatalf("%s not mounted after the kill: the test proves nothing", s)
		}
	}

	m, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	removed, err := m.Cleanup()
	if err != nil {
		t.Fatal(err)
	}
	if removed != 4 {
		t.Errorf("Cleanup removed %d mounts, want 4", removed)
	}
	for _, s := range []string{"s0", "s1", "s1.ro", "s2"} {
		p := filepath.Join(root, "sessions", s)
		if l := mountLine(t, p); l != "" {
			t.Errorf("still mounted: %s", l)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Cleanup: %v", p, err)
		}
	}
	waitNoLoops(t, root)
	for _, w := range []*Workspace{ow, pw} {
		if mountLine(t, w.Dir) == "" {
			t.Errorf("another instance's workspace %s was unmounted", w.Dir)
		}
	}
	if ow.View != ow.Dir && mountLine(t, ow.View) == "" {
		t.Errorf("another instance's view %s was unmounted", ow.View)
	}
	if len(loopsUnder(other.Root())) != 1 || len(loopsUnder(prefix.Root())) != 1 {
		t.Errorf("another instance's loop devices were detached: %v %v", loopsUnder(other.Root()), loopsUnder(prefix.Root()))
	}
}

// TestConcurrentAttach creates workspaces from several goroutines while
// another process binds and unbinds loop devices as fast as it can
// (losetup's find-then-bind): every workspace gets a device of its own
// image, and every attach succeeds.
func TestConcurrentAttach(t *testing.T) {
	m := newManager(t)
	losetup, err := lookSbin("losetup")
	if err != nil {
		t.Skip(err)
	}
	img := filepath.Join(t.TempDir(), "other.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var bg sync.WaitGroup
	var theirs atomic.Int64
	for range 2 {
		bg.Go(func() {
			for ctx.Err() == nil {
				out, err := exec.Command(losetup, "--find", "--show", img).Output()
				if err != nil {
					continue
				}
				theirs.Add(1)
				exec.Command(losetup, "-d", strings.TrimSpace(string(out))).Run()
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Go(func() {
			for i := range 5 {
				w, err := m.Create(t.Context(), filepath.Join(m.Root(), fmt.Sprintf("c%d-%d", g, i)), Limits{Bytes: MinBytes}, false)
				if err != nil {
					errs <- err
					return
				}
				// The device under it holds our image, not losetup's.
				if err := os.WriteFile(filepath.Join(w.Dir, "mine"), []byte("x"), 0o644); err != nil {
					errs <- err
				}
				if err := w.Release(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	stop()
	bg.Wait()
	close(errs)
	t.Logf("losetup bound %d devices meanwhile", theirs.Load())
	for err := range errs {
		t.Error(err)
	}
	waitNoLoops(t, m.Root())
}

// TestTemplateCopies: workspaces are copies of one formatted template per
// Limits; a copy is a clean filesystem (e2fsck finds nothing), copies are
// independent, and more distinct limits than templates kept still work.
func TestTemplateCopies(t *testing.T) {
	m := newManager(t)
	ts := m.fs.tmpl
	img, err := os.OpenFile(ts.dir, os.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	l := Limits{Bytes: 64 << 20, Inodes: 2048}
	if err := ts.fill(t.Context(), img, l); err != nil {
		t.Fatal(err)
	}
	e2fsck, err := lookSbin("e2fsck")
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(e2fsck, "-fn", "/proc/self/fd/3")
	cmd.ExtraFiles = []*os.File{img}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2fsck of a copy: %v\n%s", err, out)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("a copy of a %d byte filesystem allocates %d bytes", l.Bytes, st.Blocks*512)

	a, err := m.Create(t.Context(), filepath.Join(m.Root(), "a"), l, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(t.Context(), filepath.Join(m.Root(), "b"), l, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "only-a"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.Dir, "only-a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file of one copy shows in another: %v", err)
	}
	a.Release()
	b.Release()
	for i := range maxTemplates + 3 {
		w, err := m.Create(t.Context(), filepath.Join(m.Root(), "l"+strconv.Itoa(i)), Limits{Bytes: MinBytes, Inodes: MinInodes + int64(i)*16}, false)
		if err != nil {
			t.Fatal(err)
		}
		w.Release()
	}
	ts.mu.Lock()
	n := len(ts.byL)
	ts.mu.Unlock()
	if n > maxTemplates {
		t.Errorf("%d templates kept, want at most %d", n, maxTemplates)
	}
}
