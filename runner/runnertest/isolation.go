package runnertest

import (
	"errors"
	"fmt"
	wsfs "github.com/sandboxd/sandboxd/internal/workspace"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

func (s *suite) testWorkspaceRW(t *testing.T) {
	ws := workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	res := s.sh(t, sb, "cat in.txt && echo written > out.txt && mkdir -p sub && echo deep > sub/f")
	mustOK(t, res)
	if string(res.Stdout) != "from host" {
		t.Fatalf("read %q", res.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "written\n" {
		t.Fatalf("host sees %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "f")); err != nil || string(b) != "deep\n" {
		t.Fatalf("host sees %q, %v", b, err)
	}
	if s.caps.MountNamespace {
		res = s.sh(t, sb, "pwd; ls "+runner.WorkspaceDir)
		mustOK(t, res)
		if !strings.HasPrefix(string(res.Stdout), runner.WorkspaceDir+"\n") || !strings.Contains(string(res.Stdout), "out.txt") {
			t.Fatalf("workspace not at %s by default: %q", runner.WorkspaceDir, res.Stdout)
		}
	}
}

func (s *suite) testWorkspacePersists(t *testing.T) {
	ws := workspace(t)
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	mustOK(t, s.sh(t, sb, "echo one > state; mkdir d; echo two > d/x"))
	res := s.sh(t, sb, "cat state d/x")
	mustOK(t, res)
	if string(res.Stdout) != "one\ntwo\n" {
		t.Fatalf("second Exec read %q", res.Stdout)
	}
	// The workspace belongs to the caller: it survives Close.
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "state")); err != nil || string(b) != "one\n" {
		t.Fatalf("workspace content after Close: %q, %v", b, err)
	}
}

func (s *suite) testWorkspaceRO(t *testing.T) {
	// As the job service does: the sandbox mounts the read-only view.
	ws, view := workspaceOf(t, wsfs.Limits{}, true)
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("ro data"), 0o666); err != nil {
		t.Fatal(err)
	}
	// World-writable on the host: only the read-only mode may stop writes.
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ws, "in.txt"), 0o666); err != nil {
		t.Fatal(err)
	}
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: view, Isolation: Isolation(runner.WorkspaceReadOnly, runner.NetworkNone)})
	res := s.sh(t, sb, "cat in.txt")
	mustOK(t, res)
	if string(res.Stdout) != "ro data" {
		t.Fatalf("read %q", res.Stdout)
	}
	s.need(t, s.caps.MountNamespace, "a read-only workspace (mount namespace)")
	res = s.sh(t, sb, "echo x > new.txt; echo y >> in.txt; rm -f in.txt; mkdir d; echo done")
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Fatal("created a file in a read-only workspace")
	}
	if _, err := os.Stat(filepath.Join(ws, "d")); err == nil {
		t.Fatal("created a directory in a read-only workspace")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "in.txt")); string(b) != "ro data" {
		t.Fatalf("read-only file changed to %q", b)
	}
	if !strings.Contains(string(res.Stderr), "Read-only") && !strings.Contains(string(res.Stderr), "denied") {
		t.Logf("stderr: %s", res.Stderr)
	}
}

func (s *suite) testWorkspaceNone(t *testing.T) {
	s.need(t, s.caps.MountNamespace, "hiding the workspace (mount namespace)")
	ws := workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "secret"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	res := s.sh(t, sb, "pwd; cat "+runner.WorkspaceDir+"/secret; cat "+ws+"/secret; ls -a "+runner.WorkspaceDir)
	if strings.Contains(string(res.Stdout), "s3cret") {
		t.Fatalf("WorkspaceNone exposed the workspace: %s", res.Stdout)
	}
}

func (s *suite) testReadOnlyRoot(t *testing.T) {
	s.need(t, s.caps.MountNamespace, "a read-only root (mount namespace)")
	sb := s.sandbox(t, runner.SandboxSpec{})
	name := "sandboxd-probe-" + token()
	res := s.py(t, sb, fmt.Sprintf(`import os
name = %q
wrote = []
for d in ["/", "/usr", "/usr/bin", "/etc", "/bin", "/lib", "/dev", "/proc", "/var", "/root", "/home"]:
    p = os.path.join(d, name)
    try:
        with open(p, "w") as f:
            f.write("x")
        wrote.append(p)
    except OSError:
        pass
# Opening for writing is the proof; nothing is written to existing files.
for p in ["/etc/passwd", "/usr/bin/env", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"]:
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        wrote.append(p)
    except OSError:
        pass
try:
    os.mkdir("/newdir")
    wrote.append("/newdir")
except OSError:
    pass
with open("/tmp/ok", "w") as f:
    f.write("tmp is writable")
print("WROTE", wrote)`, name))
	t.Cleanup(func() { // in case a broken backend wrote to the host
		for _, d := range []string{"/", "/usr", "/usr/bin", "/etc", "/bin", "/lib", "/var", "/root", "/home"} {
			os.Remove(filepath.Join(d, name))
		}
	})
	mustOK(t, res)
	if strings.TrimSpace(string(res.Stdout)) != "WROTE []" {
		t.Fatalf("wrote outside writable areas: %s", res.Stdout)
	}
	for _, d := range []string{"/", "/usr", "/etc", "/tmp"} {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			t.Fatalf("file %s appeared on the host", filepath.Join(d, name))
		}
	}
	// /tmp is private to the sandbox.
	if _, err := os.Stat("/tmp/ok"); err == nil {
		if b, _ := os.ReadFile("/tmp/ok"); string(b) == "tmp is writable" {
			t.Fatal("sandbox /tmp is the host's /tmp")
		}
	}
}

func (s *suite) testWriteOutside(t *testing.T) {
	s.need(t, s.caps.MountNamespace, "confinement to the workspace (mount namespace)")
	ws := workspace(t)
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "host-secret"), []byte("hush"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	res := s.sh(t, sb, fmt.Sprintf(`cat %[1]s/host-secret; echo pwn > %[1]s/pwned; echo pwn > ../escape; ln -s / root-link && echo pwn > root-link/escape2; ln -s %[1]s out && echo pwn > out/pwned2; cat /proc/1/root/%[1]s/host-secret; true`, outside))
	if strings.Contains(string(res.Stdout), "hush") {
		t.Fatalf("read a host file outside the workspace: %s", res.Stdout)
	}
	for _, p := range []string{filepath.Join(outside, "pwned"), filepath.Join(outside, "pwned2"), filepath.Join(filepath.Dir(ws), "escape"), "/escape2"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Fatalf("sandbox wrote %s on the host", p)
		}
	}
}

func (s *suite) testNoNetwork(t *testing.T) {
	s.need(t, s.caps.NetNamespace, "network isolation (network namespace)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	sb := s.sandbox(t, runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	res := s.py(t, sb, fmt.Sprintf(`import socket
for host in ["127.0.0.1", "10.0.0.1", "1.1.1.1"]:
    try:
        s = socket.create_connection((host, %d), timeout=2)
        print("CONNECTED", host)
    except OSError as e:
        print("failed", host, e)`, port))
	if strings.Contains(string(res.Stdout), "CONNECTED") {
		t.Fatalf("sandbox reached the network: %s", res.Stdout)
	}
	select {
	case <-accepted:
		t.Fatal("host listener accepted a connection from the sandbox")
	case <-time.After(100 * time.Millisecond):
	}
	res = s.sh(t, sb, "cat /proc/net/dev")
	why, known := s.f.KnownLeaks[LeakNetDevice]
	seen := false
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if i := strings.Index(line, ":"); i > 0 {
			if dev := strings.TrimSpace(line[:i]); dev != "lo" {
				seen = true
				if known {
					t.Logf("known leak on runner %q: network device %q visible (%s)", s.r.Name(), dev, why)
				} else {
					t.Errorf("network device %q visible in a NetworkNone sandbox", dev)
				}
			}
		}
	}
	if known && !seen {
		t.Errorf("known leak %q no longer happens: drop it from Factory.KnownLeaks and the docs", LeakNetDevice)
	}
}

func (s *suite) testInetSocket(t *testing.T) {
	s.need(t, s.caps.Seccomp, "socket family filtering (seccomp)")
	sb := s.sandbox(t, runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkNone)})
	res := s.py(t, sb, `import socket, errno
out = []
for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ)
        out.append("OPENED %d" % fam)
    except OSError as e:
        out.append("denied %d %s" % (fam, errno.errorcode.get(e.errno)))
a, b = socket.socketpair(socket.AF_UNIX)
a.send(b"unix ok")
out.append(b.recv(10).decode())
print("\n".join(out))`)
	mustOK(t, res)
	if strings.Contains(string(res.Stdout), "OPENED") || !strings.Contains(string(res.Stdout), "unix ok") {
		t.Fatalf("socket families: %s", res.Stdout)
	}
	if !strings.Contains(string(res.Stdout), "denied 2 EPERM") {
		t.Fatalf("AF_INET not denied with EPERM: %s", res.Stdout)
	}
}

func (s *suite) testEgressRefused(t *testing.T) {
	if s.caps.Network {
		t.Skipf("runner %q supports network egress; covered by its own tests", s.r.Name())
	}
	_, err := s.r.Create(t.Context(), runner.SandboxSpec{Isolation: Isolation(runner.WorkspaceNone, runner.NetworkEgress)})
	if !errors.Is(err, runner.ErrUnsupported) {
		t.Fatalf("Create with NetworkEgress: %v, want ErrUnsupported", err)
	}
}

func (s *suite) testProcesses(t *testing.T) {
	s.need(t, s.caps.PIDNamespace, "process isolation (pid namespace)")
	sb := s.sandbox(t, runner.SandboxSpec{})
	self, _ := os.Executable()
	res := s.py(t, sb, `import os
for p in sorted(os.listdir("/proc")):
    if p.isdigit():
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").replace(b"\n", b" ").decode()
        except OSError as e:
            cmd = "?"
        print(p, cmd)`)
	mustOK(t, res)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) > 3 {
		t.Fatalf("sandbox sees %d processes:\n%s", len(lines), res.Stdout)
	}
	if strings.Contains(string(res.Stdout), filepath.Base(self)) {
		t.Fatalf("sandbox sees the test process:\n%s", res.Stdout)
	}
	// Signalling a host pid must not work either.
	res = s.sh(t, sb, fmt.Sprintf("kill -0 %d && echo REACHED", os.Getpid()))
	if strings.Contains(string(res.Stdout), "REACHED") && os.Getpid() > 10 {
		t.Fatalf("sandbox could signal pid %d", os.Getpid())
	}
}

func (s *suite) testSyscallAttacks(t *testing.T) {
	s.need(t, s.caps.Seccomp, "a seccomp filter")
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.py(t, sb, `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    r = fn()
    print(name, "ALLOWED" if r >= 0 else "denied errno=%d" % ctypes.get_errno())
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
attempt("unshare-user", lambda: libc.unshare(CLONE_NEWUSER))
attempt("unshare-ns", lambda: libc.unshare(CLONE_NEWNS | CLONE_NEWNET))
attempt("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
attempt("ptrace-traceme", lambda: libc.ptrace(0, 0, None, None))
attempt("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0))  # keyctl on x86_64
attempt("bpf", lambda: libc.syscall(321, 0, 0, 0))
attempt("io_uring_setup", lambda: libc.syscall(425, 1, None))
attempt("userfaultfd", lambda: libc.syscall(323, 0))
attempt("personality", lambda: libc.personality(0x0040000))  # ADDR_NO_RANDOMIZE
attempt("setuid0", lambda: libc.setuid(0))
attempt("chroot", lambda: libc.chroot(b"/tmp"))`)
	mustOK(t, res)
	if strings.Contains(string(res.Stdout), "ALLOWED") {
		t.Fatalf("dangerous syscalls allowed:\n%s", res.Stdout)
	}
	if runtime.GOARCH != "amd64" {
		return
	}
	// A 32-bit (int 0x80) syscall must not run; the filter kills the
	// process for a foreign syscall ABI.
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{s.f.Python, "-c", `import ctypes, mmap
code = bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax,20 (getpid); int 0x80; ret
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
r = ctypes.CFUNCTYPE(ctypes.c_long)(addr)()
print("32-bit syscall returned", r)`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Killed (seccomp's bad-arch action) or refused with an errno (gVisor
	// has no 32-bit syscall table: -ENOSYS, or -EPERM with --oci-seccomp);
	// getpid's non-negative result would mean it ran.
	if res.ExitCode == 0 && !strings.Contains(string(res.Stdout), "returned -") {
		t.Fatalf("32-bit syscall ran: %s", res.Stdout)
	}
	// The x32 ABI shares x86_64's audit arch; its syscall numbers have bit
	// 30 set, so a filter matching exact numbers would miss unshare's twin.
	res, err = sb.Exec(t.Context(), runner.Process{Args: []string{s.f.Python, "-c", `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(0x40000000 | 272, 0x10000000)  # x32 unshare(CLONE_NEWUSER)
print("x32 unshare", "ALLOWED" if r >= 0 else "denied errno=%d" % ctypes.get_errno())`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), "ALLOWED") {
		t.Fatalf("x32 syscall bypassed the filter: %s", res.Stdout)
	}
}

func (s *suite) testHostHidden(t *testing.T) {
	s.need(t, s.caps.MountNamespace, "a private root (mount namespace)")
	sb := s.sandbox(t, runner.SandboxSpec{})
	cwd, _ := os.Getwd()
	self, _ := os.Executable()
	// Markers that exist only on this host: an image may well have its own
	// /root or /var/lib, so the test plants host-unique paths instead of
	// guessing at directory names.
	marker, err := os.MkdirTemp("/var/tmp", "sandboxd-hostmarker-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(marker)
	paths := []string{marker, "/var/run/docker.sock", "/run/containerd/containerd.sock", cwd, self, os.TempDir() + "/.X11-unix"}
	if s.f.PrivateRootView {
		// Backends that build the root from the host's system dirs show
		// nothing else of it.
		paths = append(paths, "/root", "/home", "/var/lib", "/srv", "/mnt", "/sys/fs/cgroup")
	}
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "%q,", p)
	}
	res := s.py(t, sb, fmt.Sprintf(`import os
seen = [p for p in [%s] if os.path.exists(p)]
print("SEEN", seen)`, b.String()))
	mustOK(t, res)
	if strings.TrimSpace(string(res.Stdout)) != "SEEN []" {
		t.Fatalf("host paths visible in the sandbox: %s", res.Stdout)
	}
}
