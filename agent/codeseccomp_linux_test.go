package agent

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
)

// The test binary is also the launcher of User.Seccomp (as the agent's
// binary is): wrap starts it with SeccompExecArg.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == SeccompExecArg {
		fmt.Fprintln(os.Stderr, SeccompExec(os.Args[2:]))
		os.Exit(126)
	}
	os.Exit(m.Run())
}

// TestCodeSeccomp: with User.Seccomp, exec's processes and the REPL run
// under the extra filter (here: inet sockets refused) and the agent does
// not: it still opens one.
func TestCodeSeccomp(t *testing.T) {
	needPython(t)
	arch, err := seccompbpf.LookupArch(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	eperm := uint(unix.EPERM)
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: []specs.Arch{arch.OCI}, Syscalls: []specs.LinuxSyscall{{
		Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: &eperm,
		Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xffffffff, ValueTwo: unix.AF_INET}},
	}}}
	raw, err := seccompbpf.Assemble(p, arch)
	if err != nil {
		t.Fatal(err)
	}
	var filter []byte
	for _, r := range raw {
		filter = binary.NativeEndian.AppendUint16(filter, r.Op)
		filter = append(filter, r.Jt, r.Jf)
		filter = binary.NativeEndian.AppendUint32(filter, r.K)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	c, _ := startServer(t, ServerOptions{CodeUser: u.WithSeccomp(filter, self)})
	script := "import socket\nsocket.socket(socket.AF_UNIX).close()\ntry:\n    socket.socket(socket.AF_INET)\n    print('inet ok')\nexcept OSError as e:\n    print('inet', e.errno)\n"
	res, err := c.Exec(t.Context(), ExecRequest{Args: []string{testPython, "-c", script}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); res.ExitCode != 0 || got != fmt.Sprintf("inet %d", unix.EPERM) {
		t.Fatalf("exec under the code filter: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	rr, err := c.REPL(t.Context(), REPLRequest{Code: script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rr.Stdout, fmt.Sprintf("inet %d", unix.EPERM)) {
		t.Fatalf("REPL under the code filter: %+v", rr)
	}
	// The agent itself is not filtered.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("the agent lost inet sockets: %v", err)
	}
	unix.Close(fd)
}
