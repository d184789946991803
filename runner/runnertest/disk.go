package runnertest

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	wsfs "github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner"
)

// Workspaces as the job service makes them: each its own filesystem
// (internal/workspace), mounted nosuid,nodev on the host, with a
// read-only view for read-only sandboxes. The suite's workspaces are
// such filesystems when it runs as root (plain directories otherwise),
// so every workspace test runs on what production runs on.

// suiteWorkspaces is the Manager of the suite's workspaces (one per test
// process, its root a temporary directory the sandbox user may traverse),
// or why there is none: this host cannot make workspace filesystems (not
// root; no loop devices, as in the user-mode Linux of runner/local's
// cgroup v2 test). Without one the suite uses plain directories and skips
// the tests of the disk limits, saying why.
var suiteWorkspaces = sync.OnceValues(func() (*wsfs.Manager, string) {
	if os.Geteuid() != 0 {
		return nil, "workspace filesystems need root"
	}
	root, err := os.MkdirTemp("", "runnertest-ws-")
	if err != nil {
		return nil, err.Error()
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err.Error()
	}
	m, err := wsfs.New(wsfs.Options{Root: root})
	if err != nil {
		os.RemoveAll(root)
		return nil, err.Error()
	}
	return m, ""
})

func fsUnavailable() string {
	_, why := suiteWorkspaces()
	return why
}

var workspaceSeq atomic.Int64

// workspace returns a fresh host directory for a sandbox workspace: its
// own filesystem of the default limits when root, else a plain directory.
func workspace(t *testing.T) string {
	t.Helper()
	dir, _ := workspaceOf(t, wsfs.Limits{}, false)
	return dir
}

// workspaceOf makes a workspace bounded by l and returns its host
// directory and what a sandbox of mode ro (readOnly) mounts. Released at
// cleanup, after the sandboxes created later are closed.
func workspaceOf(t *testing.T, l wsfs.Limits, readOnly bool) (dir, view string) {
	t.Helper()
	m, _ := suiteWorkspaces()
	if m == nil {
		dir := t.TempDir()
		if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir, dir
	}
	w, err := m.Create(t.Context(), filepath.Join(m.Root(), "ws"+strconv.FormatInt(workspaceSeq.Add(1), 10)), l, readOnly)
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Release(); err != nil {
			t.Errorf("release workspace: %v", err)
		}
	})
	return w.Dir, w.View
}

// testWorkspaceMountFlags plants, from the host, a set-user-ID-root
// program and device nodes in the workspace (read-write and read-only):
// inside, the program runs as the code's uid, no node opens, and the
// workspace is mounted nosuid,nodev (issue 9 item 6: Docker's ro bind lost
// both). The nodes are /dev/null's and /dev/mem's numbers and the
// workspace's own loop device.
func (s *suite) testWorkspaceMountFlags(t *testing.T) {
	s.need(t, fsUnavailable() == "", "workspace filesystems ("+fsUnavailable()+")")
	s.need(t, s.caps.MountNamespace, "a workspace mounted at "+runner.WorkspaceDir+" (mount namespace)")
	for _, mode := range []runner.WorkspaceMode{runner.WorkspaceReadWrite, runner.WorkspaceReadOnly} {
		t.Run(string(mode), func(t *testing.T) {
			dir, view := workspaceOf(t, wsfs.Limits{Bytes: wsfs.MinBytes}, mode == runner.WorkspaceReadOnly)
			plantPrivileged(t, dir)
			sb := s.sandbox(t, runner.SandboxSpec{Workspace: view, Isolation: Isolation(mode, runner.NetworkNone)})
			s.attack(t, sb, []string{"workspace lacks nosuid", "workspace lacks nodev", "run a set-user-ID-root program",
				"open a 1:3 node", "open a 1:1 node", "open the workspace's block device"}, `
st = os.statvfs("/workspace")
def flag(bit, name):
    def f():
        if st.f_flag & bit:
            raise OSError(errno.EPERM, name + " is set")
        return "flags %#x" % st.f_flag
    return f
attempt("workspace lacks nosuid", flag(os.ST_NOSUID, "nosuid"))
attempt("workspace lacks nodev", flag(os.ST_NODEV, "nodev"))
def suid():
    out = subprocess.run(["/workspace/suid-id", "-u"], capture_output=True, text=True).stdout.strip()
    if out != str(os.getuid()):
        return "euid " + out
    raise OSError(errno.EPERM, "ran as " + out)
attempt("run a set-user-ID-root program", suid)
def opendev(name):
    def f():
        fd = os.open("/workspace/" + name, os.O_RDWR)
        try:
            return os.read(fd, 1)
        finally:
            os.close(fd)
    return f
attempt("open a 1:3 node", opendev("null"))
attempt("open a 1:1 node", opendev("mem"))
attempt("open the workspace's block device", opendev("disk"))
`)
		})
	}
}

// plantPrivileged puts into dir, as root on the host, a set-user-ID-root
// copy of id(1) and device nodes open to everyone: "null" (1:3), "mem"
// (1:1) and "disk" (the block device of dir's filesystem).
func plantPrivileged(t *testing.T, dir string) {
	t.Helper()
	src, err := os.Open("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, "suid-id"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	if err := os.Chown(dst.Name(), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst.Name(), 0o4755); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	for name, node := range map[string]struct {
		mode uint32
		dev  uint64
	}{
		"null": {unix.S_IFCHR, unix.Mkdev(1, 3)},
		"mem":  {unix.S_IFCHR, unix.Mkdev(1, 1)},
		"disk": {unix.S_IFBLK, st.Dev},
	} {
		p := filepath.Join(dir, name)
		if err := unix.Mknod(p, node.mode|0o666, int(node.dev)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

// diskScript fills each path given in argv[2:] with bytes, then with at
// most argv[1] files, and prints "<path> bytes N ERRNO" and "<path> files
// N ERRNO" (ERRNO "none": no error).
const diskScript = `import errno, os, sys
for d in sys.argv[2:]:
    n, err = 0, "none"
    fd = os.open(d + "/big", os.O_WRONLY | os.O_CREAT, 0o600)
    buf = b"x" * (1 << 20)
    try:
        while n < (1 << 31):
            n += os.write(fd, buf)
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)
    os.unlink(d + "/big")
    print(d, "bytes", n, err, flush=True)
    n, err = 0, "none"
    try:
        while n < int(sys.argv[1]):
            os.close(os.open("%s/f%d" % (d, n), os.O_WRONLY | os.O_CREAT, 0o600))
            n += 1
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
    print(d, "files", n, err, flush=True)
    for i in range(n):
        os.unlink("%s/f%d" % (d, i))
`

// testDiskLimits fills the workspace (a filesystem of the disk limits, as
// the job service makes it), /tmp and /dev/shm from inside: each ends in
// ENOSPC at Limits.DiskBytes bytes and DiskInodes files (the tmpfs mounts
// at their runner cap, if lower), the host's disk loses no more than the
// workspace's size, and the sandbox still answers.
func (s *suite) testDiskLimits(t *testing.T) {
	s.need(t, fsUnavailable() == "", "workspace filesystems ("+fsUnavailable()+")")
	s.need(t, s.caps.MountNamespace, "a fresh /tmp (mount namespace)")
	l := runner.Limits{DiskBytes: 32 << 20, DiskInodes: 512}
	dir, view := workspaceOf(t, wsfs.Limits{Bytes: l.DiskBytes, Inodes: l.DiskInodes}, false)
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: view, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone), Limits: l})
	var before unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &before); err != nil {
		t.Fatal(err)
	}
	maxFiles := strconv.FormatInt(4*l.DiskInodes, 10) // an unbounded tmpfs stops there
	res := s.exec(t, sb, runner.Process{Args: []string{s.f.Python, "-c", diskScript, maxFiles, runner.WorkspaceDir, "/tmp", "/dev/shm"}, Timeout: 2 * time.Minute})
	t.Logf("stdout:\n%s", res.Stdout)
	mustOK(t, res)
	got := map[string][2]int64{} // "path kind" -> count, 1 if ENOSPC
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("bad line %q", line)
		}
		n, _ := strconv.ParseInt(f[2], 10, 64)
		var enospc int64
		if f[3] == "ENOSPC" || f[3] == "EDQUOT" {
			enospc = 1
		}
		got[f[0]+" "+f[1]] = [2]int64{n, enospc}
	}
	for _, p := range []string{runner.WorkspaceDir, "/tmp", "/dev/shm"} {
		b, files := got[p+" bytes"], got[p+" files"]
		if b[1] != 1 || b[0] > l.DiskBytes || b[0] < l.DiskBytes*3/4 {
			t.Errorf("%s: %d bytes written (ENOSPC %v), want ENOSPC at about %d (disk_bytes)", p, b[0], b[1] == 1, l.DiskBytes)
		}
		why, known := s.f.KnownLeaks[LeakTmpfsInodes]
		switch enforced := files[1] == 1 && files[0] <= l.DiskInodes && files[0] >= l.DiskInodes*3/4; {
		case p != runner.WorkspaceDir && known && !enforced:
			t.Logf("known leak on runner %q: %s: %d files (%s)", s.r.Name(), p, files[0], why)
		case p != runner.WorkspaceDir && known:
			t.Errorf("known leak %q no longer happens (%s holds %d files): drop it from Factory.KnownLeaks and the docs", LeakTmpfsInodes, p, files[0])
		case !enforced:
			t.Errorf("%s: %d files created (ENOSPC %v), want ENOSPC at about %d (disk_inodes)", p, files[0], files[1] == 1, l.DiskInodes)
		}
	}
	// The host's filesystem holding the workspace: only the workspace's
	// own size at most (plus what others on the host wrote meanwhile).
	var after unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &after); err != nil {
		t.Fatal(err)
	}
	if lost := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize; lost > l.DiskBytes+(64<<20) {
		t.Errorf("the host's disk lost %d bytes to a %d byte workspace", lost, l.DiskBytes)
	}
	s.stillAnswers(t, sb)
	res = s.sh(t, sb, "echo after > /workspace/ok && cat /workspace/ok")
	mustOK(t, res)
	if string(res.Stdout) != "after\n" {
		t.Fatalf("workspace after filling and emptying it: %q", res.Stdout)
	}
}
