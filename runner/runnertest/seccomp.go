package runnertest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
)

// The kernel reads int (and unsigned int) syscall arguments from the low
// 32 bits of their register. A seccomp rule comparing the whole 64-bit
// value is fooled by garbage in the high half: socket(AF_VSOCK|1<<32)
// passed a "deny AF_VSOCK" rule and made a real vsock socket. These attacks
// call every conditioned int argument in its plain and its high-bit forms
// and demand exactly the same answer (success, or the same errno), plus
// the answer the policy gives the plain form.

// highBitsPy defines pair(name, fn, low, want): it calls fn with low and
// with low plus garbage in the high 32 bits and prints
//
//	PAIR name low-answer high-answer... WANT want
//
// where an answer is "ok" or the errno's name. want "any" accepts any
// answer the low form gets.
const highBitsPy = `import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
HIGH = [1 << 32, 0xdead << 32, 0xffffffff << 32]
def call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno())), r
    return "ok", r
def pair(name, fn, low, want):
    answers = [fn(low)] + [fn(low | h) for h in HIGH]
    print("PAIR", name, " ".join(answers), "WANT", want)
`

// checkPairs reads the PAIR lines: each pair's answers must all equal the
// first (the plain value's), and that must be what WANT says.
func checkPairs(t *testing.T, out string, wantPairs int) {
	t.Helper()
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "PAIR" {
			continue
		}
		n++
		name, answers, want := f[1], f[2:len(f)-2], f[len(f)-1]
		for i, a := range answers[1:] {
			if a != answers[0] {
				t.Errorf("%s: low form answered %s, high-bit form %d answered %s", name, answers[0], i+1, a)
			}
		}
		if want != "any" && answers[0] != want {
			t.Errorf("%s: answered %s, want %s", name, answers[0], want)
		}
	}
	if n != wantPairs {
		t.Fatalf("probe printed %d pairs, want %d:\n%s", n, wantPairs, out)
	}
}

// testHighBitArgs: socket families, ioctl commands, clone flags and
// personality values with high bits set get the plain value's answer,
// with and without the http effect.
func (s *suite) testHighBitArgs(t *testing.T) {
	s.need(t, s.caps.Seccomp, "a seccomp filter")
	if runtime.GOARCH != "amd64" {
		t.Skipf("the probe uses x86_64 syscall numbers, not %s", runtime.GOARCH)
	}
	for _, http := range []bool{false, true} {
		t.Run(fmt.Sprintf("http=%v", http), func(t *testing.T) {
			spec := s.spec(t, runner.SandboxSpec{}, http)
			sb := s.sandbox(t, spec)
			inet := "EPERM"
			if http {
				inet = "ok"
			}
			res := s.py(t, sb, highBitsPy+fmt.Sprintf(`
def sock(typ):
    def f(fam):
        a, fd = call(41, fam, typ, 0)
        if a == "ok": os.close(fd)
        return a
    return f
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5
pair("socket-AF_UNIX", sock(SOCK_STREAM), 1, "ok")
pair("socket-AF_INET", sock(SOCK_STREAM), 2, %[1]q)
pair("socket-AF_INET6", sock(SOCK_STREAM), 10, %[1]q)
pair("socket-AF_NETLINK", sock(SOCK_RAW), 16, %[1]q)
pair("socket-AF_PACKET", sock(SOCK_RAW), 17, "EPERM")
pair("socket-AF_ALG", sock(SOCK_SEQPACKET), 38, "EPERM")
pair("socket-AF_VSOCK", sock(SOCK_STREAM), 40, "EPERM")
pair("socket-AF_BLUETOOTH", sock(SOCK_STREAM), 31, "EPERM")
# ioctl on fd -1: EBADF when the filter lets it through, EPERM when not.
def ioctl(cmd):
    return call(16, -1 & 0xffffffffffffffff, cmd, 0)[0]
pair("ioctl-TIOCSTI", ioctl, 0x5412, "EPERM")
pair("ioctl-TIOCLINUX", ioctl, 0x541C, "EPERM")
pair("ioctl-TCGETS", ioctl, 0x5401, "EBADF")
pair("ioctl-FIONREAD", ioctl, 0x541B, "EBADF")
pair("ioctl-TIOCSTI-neighbour", ioctl, 0x5413, "EBADF")
# personality: only Docker's allowed values; 0xffffffff queries.
def persona(p):
    return call(135, p)[0]
pair("personality-query", persona, 0xffffffff, "ok")
pair("personality-linux", persona, 0, "ok")
pair("personality-ADDR_NO_RANDOMIZE", persona, 0x0040000, "EPERM")
pair("personality-READ_IMPLIES_EXEC", persona, 0x0400000, "EPERM")
# clone: the child exits at once; namespace flags are refused.
SIGCHLD = 17
def clone(flags):
    a, pid = call(56, flags, 0, 0, 0, 0)
    if a == "ok":
        if pid == 0:
            libc.syscall(ctypes.c_long(231), ctypes.c_long(0))
        os.waitpid(pid, 0)
    return a
pair("clone-fork", clone, SIGCHLD, "ok")
pair("clone-NEWUSER", clone, 0x10000000 | SIGCHLD, "EPERM")
pair("clone-NEWNS", clone, 0x00020000 | SIGCHLD, "EPERM")
pair("clone-NEWNET", clone, 0x40000000 | SIGCHLD, "EPERM")
pair("clone-NEWPID", clone, 0x20000000 | SIGCHLD, "EPERM")
`, inet))
			mustOK(t, res)
			checkPairs(t, string(res.Stdout), 22)
		})
	}
}

// testIoctlCommands: the filter refuses exactly TIOCSTI and TIOCLINUX
// among ioctl commands, whatever the high bits: 300 random commands on fd
// -1 must all answer EBADF (let through), the two refused ones EPERM.
func (s *suite) testIoctlCommands(t *testing.T) {
	s.need(t, s.caps.Seccomp, "a seccomp filter")
	if runtime.GOARCH != "amd64" {
		t.Skipf("the probe uses x86_64 syscall numbers, not %s", runtime.GOARCH)
	}
	sb := s.sandbox(t, s.spec(t, runner.SandboxSpec{}, false))
	res := s.py(t, sb, highBitsPy+`
import random
rnd = random.Random(9)
wrong = []
cmds = [rnd.getrandbits(64) for _ in range(300)] + [rnd.getrandbits(32) << 32 | c for c in (0x5412, 0x541C) for _ in range(20)]
for cmd in cmds:
    got = call(16, 0xffffffffffffffff, cmd, 0)[0]
    want = "EPERM" if cmd & 0xffffffff in (0x5412, 0x541C) else "EBADF"
    if got != want:
        wrong.append("%#x:%s" % (cmd, got))
print("WRONG", len(cmds), wrong)`)
	mustOK(t, res)
	if got := strings.TrimSpace(string(res.Stdout)); got != "WRONG 340 []" {
		t.Fatalf("ioctl commands the filter answered wrongly (command:answer): %s", got)
	}
}

// testClone3UserNS: seccomp cannot read clone3's flags (they are in user
// memory), so under gVisor clone3(CLONE_NEWUSER) succeeds and the child
// holds every capability in a new user namespace. Whatever the child got,
// it must not gain anything its parent lacks: mount a tmpfs or a bind,
// chroot, setns, unshare a network namespace, set the hostname, open an
// inet socket in a sandbox without http, read a file the parent cannot
// read, or write / and /proc/sys. Where clone3 is refused (runc and the
// local runner answer ENOSYS), the checks run in a plain fork child.
func (s *suite) testClone3UserNS(t *testing.T) {
	s.need(t, s.caps.Seccomp, "a seccomp filter")
	if runtime.GOARCH != "amd64" {
		t.Skipf("the probe uses x86_64 syscall numbers, not %s", runtime.GOARCH)
	}
	sb := s.sandbox(t, s.spec(t, runner.SandboxSpec{}, false))
	res := s.py(t, sb, `import ctypes, errno, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
# What the parent cannot read: root's files, pid 1's environment
# where pid 1 is not the code's uid.
SECRETS = []
for p in ["/etc/shadow", "/proc/1/environ"]:
    try:
        open(p, "rb").read(1)
    except OSError:
        SECRETS.append(p)
print("SECRETS", len(SECRETS), " ".join(SECRETS))
CLONE_NEWUSER, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x40000000, 17
# struct clone_args (v0, 64 bytes): flags, pidfd, child_tid, parent_tid,
# exit_signal, stack, stack_size, tls.
args = ctypes.create_string_buffer(struct.pack("8Q", CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0), 64)
r, w = os.pipe()
pid = libc.syscall(ctypes.c_long(435), args, ctypes.c_ulong(64))
if pid < 0:
    print("CLONE3", err())
    pid = os.fork()
else:
    print("CLONE3 ok")
if pid == 0:
    os.close(r)
    out = []
    def attempt(name, fn):
        try:
            rc = fn()
        except OSError as e:
            out.append("%s:%s" % (name, errno.errorcode.get(e.errno, e.errno)))
            return
        out.append("%s:%s" % (name, err() if rc is not None and rc < 0 else "GAINED"))
    # Become root of the new user namespace where it is one (the child
    # may map its own uid): capabilities there must still not reach out.
    def mapme():
        for f, s in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", "0 65534 1"), ("/proc/self/gid_map", "0 65534 1")):
            with open(f, "w") as fh:
                fh.write(s)
        return 0
    try:
        mapme()
        out.append("mapped-root:yes")
    except OSError as e:
        out.append("mapped-root:no")
    attempt("mount-tmpfs", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
    attempt("mount-bind", lambda: libc.mount(b"/", b"/tmp", None, 4096, None))  # MS_BIND
    attempt("chroot", lambda: libc.chroot(b"/tmp"))
    def setns():
        fd = os.open("/proc/self/ns/net", os.O_RDONLY)
        return libc.setns(fd, 0)
    attempt("setns", setns)
    attempt("unshare-net", lambda: libc.unshare(CLONE_NEWNET))
    attempt("sethostname", lambda: libc.sethostname(b"pwned", 5))
    attempt("socket-inet", lambda: libc.socket(2, 1, 0))
    for p in SECRETS:
        attempt("read-" + p, lambda p=p: len(open(p, "rb").read(1)) and None)
    attempt("write-root", lambda: os.close(os.open("/clone3-probe", os.O_WRONLY | os.O_CREAT, 0o644)))
    attempt("write-proc-sys", lambda: os.close(os.open("/proc/sys/kernel/hostname", os.O_WRONLY)))
    os.write(w, (" ".join(out)).encode())
    os._exit(0)
os.close(w)
got = b""
while True:
    b = os.read(r, 4096)
    if not b:
        break
    got += b
_, status = os.waitpid(pid, 0)
print("CHILD", status, got.decode())`)
	mustOK(t, res)
	out := string(res.Stdout)
	t.Logf("clone3 probe:\n%s", out)
	var child, secrets []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "CHILD 0 "); ok {
			child = strings.Fields(rest)
		}
		if rest, ok := strings.CutPrefix(line, "SECRETS "); ok {
			secrets = strings.Fields(rest)[1:]
		}
	}
	if len(secrets) == 0 {
		t.Fatalf("the parent reads every secret: the probe proves nothing:\n%s", out)
	}
	if len(child) != 10+len(secrets) {
		t.Fatalf("child reported %d results, want %d:\n%s", len(child), 10+len(secrets), out)
	}
	for _, r := range child {
		if strings.HasSuffix(r, ":GAINED") {
			t.Errorf("the clone3 child gained what its parent lacks: %s", r)
		}
	}
}
