package agent

import (
	"os"
	"syscall"
)

// User is the uid and gid the agent gives the code: every process it
// starts (exec, the REPL interpreter) and every file it creates. sandboxd's
// agent model (package policy) makes it 65534:65534 while the agent itself
// runs as uid 0 with only the capabilities it needs for that.
type User struct {
	UID, GID uint32
	// Seccomp, when set, is a raw filter (struct sock_filter[]) every
	// process of the code gets on top of the agent's own (wrap): the
	// agent's binary starts it (SeccompExec). self is that binary.
	Seccomp []byte
	self    string
}

// WithSeccomp returns u whose processes start under filter (the raw
// struct sock_filter[]) through the agent binary at self.
func (u User) WithSeccomp(filter []byte, self string) *User {
	u.Seccomp, u.self = filter, self
	return &u
}

// sysProcAttr is how a process for the code starts: in its own process
// group (the agent kills the group) and, with u set, as u's uid and gid
// with no supplementary groups (CAP_SETUID and CAP_SETGID). The change from
// uid 0 to a non-zero uid clears the permitted, effective and ambient
// capability sets; the inheritable set is empty (Harden, the runner).
func (u *User) sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		a.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	return a
}

// chown gives f to u (CAP_CHOWN); no-op without u.
func (u *User) chown(f *os.File) error {
	if u == nil {
		return nil
	}
	return f.Chown(int(u.UID), int(u.GID))
}

// lchown gives name (relative to root, not following a final symlink) to u.
func (u *User) lchown(root *os.Root, name string) error {
	if u == nil {
		return nil
	}
	return root.Lchown(name, int(u.UID), int(u.GID))
}
