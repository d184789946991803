package runnertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// Attacks from the code against the sandbox's pid 1 (the agent) and the
// agent's socket (runner.AgentSocketPath,
// when the sandbox runs the agent). The agent model (policy.AgentUID,
// policy.CodeUID, policy.AgentCapabilities) makes every one of them fail;
// after each, the sandbox must still answer.

// GVisorKnownLeaks are what gVisor's kernel (the Sentry) lets the code see
// of pid 1 whatever the runner does; Factory.KnownLeaks of runsc backends.
var GVisorKnownLeaks = map[string]string{
	"list /proc/1/fdinfo":   "gVisor's procfs lets any task list and read another's fdinfo: fd numbers, positions and open flags, not what the fds are (the fd directory and its links stay closed)",
	"workspace lacks nodev": "gVisor's VFS has no nodev (runsc drops the option); a device node in the workspace opens only the Sentry's own emulation of that device number, never a host device (the host mount is nodev too)",
	"open a 1:3 node":       "a 1:3 node in the workspace opens the Sentry's own /dev/null (gVisor emulates devices by number and opens no host device: 1:1 is ENXIO)",
	LeakTmpfsInodes:         "runsc passes only mode, size, uid and gid to its tmpfs mounts: nr_inodes is dropped, so the files in /tmp and /dev/shm are bounded by the sandbox's memory limit (each is Sentry memory in its cgroup: past it the sandbox is OOM-killed), not by disk_inodes",
}

// LeakTmpfsInodes names, in Factory.KnownLeaks, a backend whose /tmp and
// /dev/shm ignore Limits.DiskInodes.
const LeakTmpfsInodes = "tmpfs nr_inodes"

// LeakNetDevice names, in Factory.KnownLeaks, a backend whose NetworkNone
// sandboxes see a network device besides lo (one they cannot open a
// socket on: testInetSocket still holds).
const LeakNetDevice = "network device"

// attackPrelude defines attempt(name, fn): it prints "name: denied ERRNO"
// when fn raises OSError and "name: ALLOWED result" otherwise. c(r)
// turns a failed libc call's -1 into OSError.
const attackPrelude = `import ctypes, errno, os, signal, socket, stat, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def c(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def attempt(name, fn):
    try:
        r = fn()
    except OSError as e:
        print(name + ": denied", errno.errorcode.get(e.errno, e.errno), flush=True)
        return
    print(name + ": ALLOWED", repr(r)[:160], flush=True)
`

// attack runs script (after attackPrelude) as the code and fails the test
// for every attempt it reports ALLOWED, or if it did not report all of
// want. Then it checks the sandbox still answers.
func (s *suite) attack(t *testing.T, sb runner.Sandbox, want []string, script string) {
	t.Helper()
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{s.f.Python, "-c", attackPrelude + script}, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("attack: Exec: %v (the attack took the sandbox down?)", err)
	}
	out := string(res.Stdout)
	t.Logf("attack results:\n%s", out)
	if res.ExitCode != 0 {
		t.Errorf("attack script exited %d: %s", res.ExitCode, res.Stderr)
	}
	for _, line := range strings.Split(out, "\n") {
		name, result, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		why, known := s.f.KnownLeaks[name]
		switch allowed := strings.HasPrefix(result, "ALLOWED"); {
		case allowed && known:
			t.Logf("known leak on runner %q: %s (%s)", s.r.Name(), line, why)
		case allowed:
			t.Errorf("attack succeeded: %s", line)
		case known:
			t.Errorf("known leak %q no longer happens (%s): drop it from Factory.KnownLeaks and the docs", name, result)
		}
	}
	for _, w := range want {
		if !strings.Contains(out, w+": ") {
			t.Errorf("attack %q did not run", w)
		}
	}
	s.stillAnswers(t, sb)
}

// stillAnswers checks the sandbox runs another Exec (and, with an agent,
// answers a ping) after an attack.
func (s *suite) stillAnswers(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"echo", "still here"}, Timeout: 30 * time.Second})
	if err != nil || string(res.Stdout) != "still here\n" {
		t.Fatalf("sandbox does not answer after the attack: %v %q %q", err, res.Stdout, res.Stderr)
	}
	if as, ok := sb.(runner.AgentSandbox); ok {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := as.Agent().Ping(ctx); err != nil {
			t.Fatalf("agent does not answer a ping after the attack: %v", err)
		}
	}
}

func (s *suite) testAgentMemory(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	files := []string{"environ", "maps", "smaps", "auxv", "syscall", "pagemap", "io", "personality"}
	want := []string{"open /proc/1/mem O_RDONLY", "open /proc/1/mem O_RDWR", "open /proc/1/task/*/mem",
		"list /proc/1/fd", "readlink /proc/1/fd/*", "list /proc/1/fdinfo", "list /proc/1/map_files",
		"readlink /proc/1/exe", "readlink /proc/1/cwd", "list /proc/1/root"}
	for _, f := range files {
		want = append(want, "read /proc/1/"+f)
	}
	s.attack(t, sb, want, `
def mem(path, mode):
    fd = os.open(path, mode)
    try:
        try:
            addr = int(open("/proc/1/maps").read().split("-", 1)[0], 16)
        except (OSError, ValueError):
            addr = 0x400000  # a static Go binary's text
        try:
            os.lseek(fd, addr, 0)
            return "opened; read %r" % os.read(fd, 16)
        except OSError as e:
            return "opened (%s)" % e
    finally:
        os.close(fd)
def read(p):
    with open(p, "rb") as f:
        return f.read(4096)
def any_of(paths, fn):
    got, err = [], None
    for p in paths:
        try:
            got.append((p, fn(p)))
        except OSError as e:
            err = e
    if not got:
        raise err or OSError(errno.ENOENT, "nothing to try")
    return got
attempt("open /proc/1/mem O_RDONLY", lambda: mem("/proc/1/mem", os.O_RDONLY))
attempt("open /proc/1/mem O_RDWR", lambda: mem("/proc/1/mem", os.O_RDWR))
attempt("open /proc/1/task/*/mem", lambda: any_of(["/proc/1/task/%s/mem" % t for t in os.listdir("/proc/1/task")], lambda p: mem(p, os.O_RDONLY)))
for f in `+pyList(files)+`:
    attempt("read /proc/1/" + f, lambda f=f: read("/proc/1/" + f))
attempt("list /proc/1/fd", lambda: os.listdir("/proc/1/fd"))
attempt("readlink /proc/1/fd/*", lambda: any_of(["/proc/1/fd/%d" % i for i in range(64)], os.readlink))
attempt("list /proc/1/fdinfo", lambda: os.listdir("/proc/1/fdinfo"))
attempt("list /proc/1/map_files", lambda: os.listdir("/proc/1/map_files"))
attempt("readlink /proc/1/exe", lambda: os.readlink("/proc/1/exe"))
attempt("readlink /proc/1/cwd", lambda: os.readlink("/proc/1/cwd"))
attempt("list /proc/1/root", lambda: os.listdir("/proc/1/root"))
`)
}

func (s *suite) testAgentPtrace(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	s.attack(t, sb, []string{"ptrace attach", "ptrace seize", "process_vm_readv", "process_vm_writev", "pidfd_getfd"}, `
PTRACE_ATTACH, PTRACE_SEIZE, PTRACE_DETACH = 16, 0x4206, 17
def trace(req):
    c(libc.ptrace(req, 1, None, None))
    libc.ptrace(PTRACE_DETACH, 1, None, None)
    return "attached"
attempt("ptrace attach", lambda: trace(PTRACE_ATTACH))
attempt("ptrace seize", lambda: trace(PTRACE_SEIZE))
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(16)
def vm(fn):
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 16)
    remote = iovec(0x400000, 16)  # a static Go binary's text
    r = fn(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if r < 0 and ctypes.get_errno() == errno.EFAULT:
        return "permitted (EFAULT: address not mapped)"
    return c(r)
attempt("process_vm_readv", lambda: vm(libc.process_vm_readv))
attempt("process_vm_writev", lambda: vm(libc.process_vm_writev))
def getfd():
    pfd = c(libc.syscall(434, 1, 0))  # pidfd_open: no permission needed
    got = []
    for fd in range(64):
        r = libc.syscall(438, pfd, fd, 0)  # pidfd_getfd: needs ptrace access
        if r >= 0:
            got.append(fd)
            os.close(r)
        elif ctypes.get_errno() != errno.EBADF:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
    if not got:
        raise OSError(errno.EBADF, "no fd")
    return got
attempt("pidfd_getfd", getfd)
`)
}

func (s *suite) testAgentSignals(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	// First the signals the kernel drops for a pid namespace's init even
	// when permitted (the permission check is what counts), then those
	// that end the agent when permitted: one process each, so an agent
	// killed by one shows as the sandbox not answering.
	s.attack(t, sb, []string{"kill 0", "kill SIGSTOP", "kill SIGKILL", "pidfd_send_signal SIGKILL"}, `
attempt("kill 0", lambda: os.kill(1, 0))
attempt("kill SIGSTOP", lambda: os.kill(1, signal.SIGSTOP))
attempt("kill SIGKILL", lambda: os.kill(1, signal.SIGKILL))
def pidfd_kill():
    pfd = c(libc.syscall(434, 1, 0))
    return c(libc.syscall(424, pfd, signal.SIGKILL, None, 0))
attempt("pidfd_send_signal SIGKILL", pidfd_kill)
`)
	for _, sig := range []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGSEGV"} {
		s.attack(t, sb, []string{"kill " + sig, "killpg " + sig}, fmt.Sprintf(`
attempt("kill %[1]s", lambda: os.kill(1, signal.%[1]s))
if os.getpgid(1) == os.getpgrp():
    print("killpg %[1]s: skipped: the code shares pid 1's process group (kill covers it)")
elif os.getpgid(1) == 0:
    print("killpg %[1]s: skipped: pid 1's process group is outside this pid namespace")
else:
    attempt("killpg %[1]s", lambda: os.killpg(os.getpgid(1), signal.%[1]s))
`, sig))
	}
}

func (s *suite) testAgentSocket(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	script := fmt.Sprintf(`
D, S = %q, %q
try:
    st = os.stat(D)
    print("dir: present uid=%%d mode=%%o" %% (st.st_uid, stat.S_IMODE(st.st_mode)))
except OSError as e:
    print("dir: absent", errno.errorcode.get(e.errno, e.errno))
def connect(p):
    so = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    so.settimeout(5)
    so.connect(p)
    return "connected"
def bind(p):
    so = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    so.bind(p)
    return "bound"
def replace_dir():
    os.makedirs("/tmp/fake-sandboxd", exist_ok=True)
    os.rename("/tmp/fake-sandboxd", D)
attempt("list dir", lambda: os.listdir(D))
attempt("stat socket", lambda: os.stat(S))
attempt("connect socket", lambda: connect(S))
attempt("connect egress socket", lambda: connect(D + "/egress.sock"))
attempt("unlink socket", lambda: os.unlink(S))
attempt("rename socket", lambda: os.rename(S, D + "/moved.sock"))
attempt("create file in dir", lambda: os.close(os.open(D + "/evil", os.O_CREAT | os.O_WRONLY, 0o666)))
attempt("bind socket in dir", lambda: bind(D + "/agent.sock.new"))
attempt("symlink in dir", lambda: os.symlink("/tmp", D + "/link"))
attempt("chmod dir", lambda: os.chmod(D, 0o777))
attempt("rename dir", lambda: os.rename(D, D + ".old"))
attempt("rename dir to /tmp", lambda: os.rename(D, "/tmp/sandboxd-moved"))
attempt("replace dir", replace_dir)
attempt("rmdir dir", lambda: os.rmdir(D))
attempt("mkdir dir", lambda: os.mkdir(D))
`, runner.AgentDir, runner.AgentSocketPath)
	s.attack(t, sb, []string{"list dir", "stat socket", "connect socket", "unlink socket", "rename socket",
		"create file in dir", "bind socket in dir", "symlink in dir", "chmod dir", "rename dir", "replace dir", "rmdir dir"}, script)
	if _, ok := sb.(runner.AgentSandbox); ok {
		// With an agent the directory must be there (else the attacks
		// above tried nothing) and closed to the code.
		res := s.py(t, sb, fmt.Sprintf(`import os, stat
st = os.stat(%q)
print(st.st_uid, oct(stat.S_IMODE(st.st_mode)))`, runner.AgentDir))
		mustOK(t, res)
		if got, want := strings.TrimSpace(string(res.Stdout)), fmt.Sprintf("%d 0o700", policy.AgentUID); got != want {
			t.Errorf("%s: uid and mode %q, want %q", runner.AgentDir, got, want)
		}
	}
}

// testUnprivileged checks who the code is, in an Exec, in a process it
// starts and, with an agent, in the Python REPL (also code): uid and gid
// policy.CodeUID/CodeGID, no supplementary groups, no capabilities (the
// bounding set may keep the agent's), no_new_privs, the seccomp filter.
func (s *suite) testUnprivileged(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	res := s.exec(t, sb, runner.Process{Args: []string{"cat", "/proc/self/status"}})
	mustOK(t, res)
	s.checkCodeStatus(t, "exec", string(res.Stdout))
	res = s.py(t, sb, `import subprocess
print(subprocess.run(["/bin/sh", "-c", "cat /proc/self/status"], capture_output=True, text=True).stdout)`)
	mustOK(t, res)
	s.checkCodeStatus(t, "grandchild", string(res.Stdout))
	if as, ok := sb.(runner.AgentSandbox); ok {
		r, err := as.Agent().REPL(t.Context(), replRequest(`print(open("/proc/self/status").read())`), nil)
		if err != nil || !r.OK {
			t.Fatalf("REPL: %v %+v", err, r)
		}
		s.checkCodeStatus(t, "repl", r.Stdout)
	}
}

func (s *suite) checkCodeStatus(t *testing.T, who, status string) {
	t.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	t.Logf("%s: Uid %q Gid %q Groups %q CapInh %s CapPrm %s CapEff %s CapBnd %s CapAmb %s NoNewPrivs %s Seccomp %s", who,
		fields["Uid"], fields["Gid"], fields["Groups"], fields["CapInh"], fields["CapPrm"], fields["CapEff"], fields["CapBnd"], fields["CapAmb"], fields["NoNewPrivs"], fields["Seccomp"])
	uid, gid := strconv.Itoa(policy.CodeUID), strconv.Itoa(policy.CodeGID)
	if want := strings.Repeat(uid+" ", 3) + uid; fields["Uid"] != want {
		t.Errorf("%s: Uid %q, want %q", who, fields["Uid"], want)
	}
	if want := strings.Repeat(gid+" ", 3) + gid; fields["Gid"] != want {
		t.Errorf("%s: Gid %q, want %q", who, fields["Gid"], want)
	}
	if fields["Groups"] != "" {
		t.Errorf("%s: supplementary groups %q, want none", who, fields["Groups"])
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if fields[k] != "0000000000000000" {
			t.Errorf("%s: %s = %q, want none", who, k, fields[k])
		}
	}
	if bnd, err := strconv.ParseUint(fields["CapBnd"], 16, 64); err != nil || bnd&^policy.AgentCapabilityMask() != 0 {
		t.Errorf("%s: CapBnd = %q, want a subset of the agent's %016x", who, fields["CapBnd"], policy.AgentCapabilityMask())
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("%s: NoNewPrivs = %q", who, fields["NoNewPrivs"])
	}
	if s.caps.Seccomp && fields["Seccomp"] != "2" {
		t.Errorf("%s: Seccomp = %q, want 2 (filter)", who, fields["Seccomp"])
	}
}

// testAgentPrivileges: with an agent, pid 1 is the agent as the model
// has it (seen from the code: /proc/1/status stays readable): uid and
// gid policy.AgentUID, exactly policy.AgentCapabilities in the bounding,
// effective and permitted sets, nothing inheritable or ambient,
// no_new_privs and the sandbox's seccomp filter.
func (s *suite) testAgentPrivileges(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{})
	_, ok := sb.(runner.AgentSandbox)
	s.need(t, ok, "the sandbox agent as pid 1")
	res := s.exec(t, sb, runner.Process{Args: []string{"cat", "/proc/1/status"}})
	mustOK(t, res)
	f := map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	id := strconv.Itoa(policy.AgentUID)
	caps := fmt.Sprintf("%016x", policy.AgentCapabilityMask())
	want := map[string]string{"Uid": strings.Repeat(id+" ", 3) + id, "Gid": strings.Repeat(id+" ", 3) + id,
		"CapBnd": caps, "CapEff": caps, "CapPrm": caps, "CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"}
	if s.caps.Seccomp {
		want["Seccomp"] = "2"
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("pid 1 %s: %q, want %q", k, f[k], v)
		}
	}
}

// testNoPrivilegeRegain: neither the code nor a program it starts gets
// back what it lacks: no uid or group change, no capability raised, and
// set-user-ID-root programs run without their privileges (no_new_privs).
func (s *suite) testNoPrivilegeRegain(t *testing.T) {
	s.need(t, s.f.DropsPrivileges, "privilege dropping")
	sb := s.sandbox(t, runner.SandboxSpec{})
	s.attack(t, sb, []string{"setuid(0)", "setresuid(0)", "setgid(0)", "setgroups([0])", "ambient raise CAP_KILL", "capset CAP_KILL", "setuid-root programs"}, `
attempt("setuid(0)", lambda: os.setuid(0))
attempt("setresuid(0)", lambda: os.setresuid(0, 0, 0))
attempt("setgid(0)", lambda: os.setgid(0))
attempt("setgroups([0])", lambda: os.setgroups([0]))
attempt("ambient raise CAP_KILL", lambda: c(libc.prctl(47, 2, 5, 0, 0)))  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE
class hdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
def capset():
    d = (data * 2)()
    d[0].effective = d[0].permitted = 1 << 5
    return c(libc.capset(ctypes.byref(hdr(0x20080522, 0)), d))
attempt("capset CAP_KILL", capset)
# A set-user-ID-root program, watched while it runs: its effective uid
# and capabilities, as the kernel reports them.
def suid():
    seen, tried = [], []
    for d in ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            try:
                st = os.stat(p)
            except OSError:
                continue
            if not (st.st_mode & stat.S_ISUID and st.st_uid == 0) or os.path.realpath(p) in tried:
                continue
            tried.append(os.path.realpath(p))
            pr = subprocess.Popen([p], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(300):
                try:
                    f = dict(l.split(":", 1) for l in open("/proc/%d/status" % pr.pid).read().splitlines() if ":" in l)
                except OSError:
                    break
                if f["Name"].strip() != os.path.basename(sys.executable)[:15]:
                    seen.append((n, f["Uid"].split(), f["CapEff"].strip()))
                    break
                time.sleep(0.01)
            pr.kill()
            pr.wait()
    if not tried:
        raise OSError(errno.ENOENT, "no set-user-ID-root program here")
    if not seen:
        return "inconclusive: none of %s was seen running" % tried
    for n, uid, cap in seen:
        if "0" in uid or int(cap, 16) != 0:
            return seen
    raise OSError(errno.EPERM, "ran unprivileged: %s" % seen)
attempt("setuid-root programs", suid)
`)
}

// testAgentFilesOwned: files and directories the agent creates for the
// caller (write_file) belong to the code's uid and gid.
func (s *suite) testAgentFilesOwned(t *testing.T) {
	ws := workspace(t)
	sb := s.sandbox(t, runner.SandboxSpec{Workspace: ws, Isolation: Isolation(runner.WorkspaceReadWrite, runner.NetworkNone)})
	as, ok := sb.(runner.AgentSandbox)
	s.need(t, ok, "an agent with file operations")
	if err := as.Agent().WriteFile(t.Context(), "deep/er/f.txt", []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	pull(t, sb)
	for _, p := range []string{"deep", "deep/er", "deep/er/f.txt"} {
		fi, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != policy.CodeUID || st.Gid != policy.CodeGID {
			t.Errorf("%s: owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, policy.CodeUID, policy.CodeGID)
		}
	}
	// The code can change and remove what the agent wrote.
	mustOK(t, s.sh(t, sb, "echo y >> deep/er/f.txt && rm -r deep"))
}

func replRequest(code string) agent.REPLRequest {
	return agent.REPLRequest{Code: code, Timeout: 30 * time.Second, OutputLimit: 1 << 20}
}

func pyList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
