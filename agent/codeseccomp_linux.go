package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SeccompExecArg is the agent's first argument when it runs as the
// launcher of one code process (User.Seccomp): sandbox-agent
// SeccompExecArg FD PATH ARGV...
const SeccompExecArg = "--seccomp-exec"

// sockFilterSize is sizeof(struct sock_filter).
const sockFilterSize = int(unsafe.Sizeof(unix.SockFilter{}))

// wrap makes cmd start through the agent's own binary (SeccompExecArg),
// which stacks u.Seccomp on the filter the agent runs under and then
// execs cmd's program: the code gets a stricter filter than the agent
// (the Kubernetes runner's agent needs inet sockets to listen on the pod
// network; the code of a sandbox without http must not have them). The
// filter reaches the launcher on a pipe appended to cmd.ExtraFiles; the
// returned func closes the parent's end once cmd started (or failed to).
// No-op without u.Seccomp.
func (u *User) wrap(cmd *exec.Cmd) (func(), error) {
	if u == nil || len(u.Seccomp) == 0 {
		return func() {}, nil
	}
	if u.self == "" {
		return nil, errors.New("code seccomp: the agent's own path is unknown")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("code seccomp: %w", err)
	}
	// At most BPF_MAXINSNS (4096) instructions: 32 KiB, within a pipe's
	// buffer, so the write cannot block.
	if _, err := w.Write(u.Seccomp); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("code seccomp: %w", err)
	}
	w.Close()
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	cmd.Args = append([]string{u.self, SeccompExecArg, strconv.Itoa(fd), cmd.Path}, cmd.Args...)
	cmd.Path = u.self
	return func() { r.Close() }, nil
}

// SeccompExec is the launcher (args after SeccompExecArg: FD PATH
// ARGV...): it reads a raw filter (struct sock_filter[], the kernel's
// layout) from FD, installs it on every thread (no_new_privs set first)
// and execs PATH with ARGV and its own environment. It returns only on
// failure: the program never runs without the filter.
func SeccompExec(args []string) error {
	if len(args) < 3 {
		return errors.New("seccomp-exec: want FD, PATH and ARGV")
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		return fmt.Errorf("seccomp-exec: fd %q", args[0])
	}
	f := os.NewFile(uintptr(fd), "seccomp")
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return fmt.Errorf("seccomp-exec: read filter: %w", err)
	}
	if len(b) == 0 || len(b)%sockFilterSize != 0 || len(b)/sockFilterSize > 0xffff {
		return fmt.Errorf("seccomp-exec: filter of %d bytes", len(b))
	}
	filter := make([]unix.SockFilter, len(b)/sockFilterSize)
	for i := range filter {
		r := b[i*sockFilterSize:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp-exec: no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp-exec: load filter: %w", errno)
	}
	return syscall.Exec(args[1], args[2:], os.Environ())
}
