package local

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// helperArg0 is argv[0] of the re-executed binary when it must act as the
// sandbox init helper.
const helperArg0 = "sandboxd-local-init"

// Inherited descriptors of the helper.
const (
	helperConfigFD = 3 // parent -> helper: helperConfig JSON, EOF releases
	helperStatusFD = 4 // helper -> parent: helperStatus JSON
)

// helperConfig is everything the helper needs; sent as JSON on fd 3.
type helperConfig struct {
	Probe       bool     `json:"probe,omitempty"`
	Mounts      bool     `json:"mounts"`
	Root        string   `json:"root"`   // empty mount point (in the state dir)
	Rootfs      string   `json:"rootfs"` // "" = host system dirs
	Workspace   string   `json:"workspace,omitempty"`
	WorkspaceRO bool     `json:"workspace_ro,omitempty"`
	TmpBytes    int64    `json:"tmp_bytes"`  // size= of /tmp and /dev/shm
	TmpInodes   int64    `json:"tmp_inodes"` // their nr_inodes=
	Args        []string `json:"args"`
	Env         []string `json:"env"`
	Dir         string   `json:"dir"`
	UID         int      `json:"uid"`
	GID         int      `json:"gid"`
	NoFile      uint64   `json:"nofile"`
	FileSize    uint64   `json:"fsize"`
	// Seccomp is the compiled filter (struct sock_filter array); empty:
	// none (AllowWeak).
	Seccomp []byte `json:"seccomp,omitempty"`
	// Masked and ReadOnly are the isolation's masked and read-only paths
	// (maskPaths).
	Masked       []string `json:"masked,omitempty"`
	ReadOnly     []string `json:"read_only,omitempty"`
	Landlock     bool     `json:"landlock"`
	WorkspaceRW  bool     `json:"workspace_rw,omitempty"`
	SetHostname  bool     `json:"set_hostname"`
	DropBounding bool     `json:"drop_bounding"`
	SetCreds     bool     `json:"set_creds"`
	// EgressAddr, when set (NetworkEgress), is where the helper listens
	// in the new network namespace; the socket goes back to the runner on
	// helperEgressFD (egress_linux.go).
	EgressAddr string `json:"egress_addr,omitempty"`
}

// helperStatus is the helper's report; sent as JSON on fd 4.
type helperStatus struct {
	// SetupError is an infrastructure fault before the command started.
	SetupError string `json:"setup_error,omitempty"`
	Started    bool   `json:"started"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal,omitempty"`
}

// init starts the helper as early as Go allows: packages initialise in
// dependency order and, among those ready, in import-path order, so a helper
// process skips the init work of most of the binary's dependencies (the JSON
// Schema library's alone costs ~3 ms per sandbox start). MaybeHelper in main
// stays the documented entry point; by then this has already run.
func init() { MaybeHelper() }

// MaybeHelper runs the sandbox init helper and exits when this process was
// started as one by the local runner; otherwise it returns at once. Call it
// first thing in main (and in TestMain of packages that use the runner).
func MaybeHelper() {
	if len(os.Args) == 0 || os.Args[0] != helperArg0 {
		return
	}
	runtime.LockOSThread() // thread-scoped state (bounding set, nnp) must reach the fork
	status := os.NewFile(helperStatusFD, "status")
	st := runHelper()
	_ = json.NewEncoder(status).Encode(st)
	os.Exit(0)
}

func runHelper() (st helperStatus) {
	unix.CloseOnExec(helperConfigFD)
	unix.CloseOnExec(helperStatusFD)
	// Nothing else the parent might have leaked may reach the command.
	_ = unix.CloseRange(helperStatusFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)

	var cfg helperConfig
	b, err := io.ReadAll(os.NewFile(helperConfigFD, "config"))
	if err != nil {
		return helperStatus{SetupError: "read config: " + err.Error()}
	}
	if len(b) == 0 {
		return helperStatus{SetupError: "released without a config"}
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return helperStatus{SetupError: "decode config: " + err.Error()}
	}
	if cfg.Probe {
		return helperStatus{Started: true}
	}
	if cfg.EgressAddr != "" {
		addr, err := netip.ParseAddrPort(cfg.EgressAddr)
		if err != nil {
			return helperStatus{SetupError: "egress address: " + err.Error()}
		}
		if err := setupEgressListener(addr); err != nil {
			return helperStatus{SetupError: "egress: " + err.Error()}
		}
	}
	if err := setupSandbox(&cfg); err != nil {
		return helperStatus{SetupError: err.Error()}
	}
	return runCommand(&cfg)
}

func setupSandbox(cfg *helperConfig) error {
	if cfg.Mounts {
		if err := buildRoot(cfg); err != nil {
			return fmt.Errorf("build root: %w", err)
		}
	}
	if cfg.SetHostname {
		_ = unix.Sethostname([]byte("sandbox"))
	}
	if cfg.DropBounding {
		if err := dropCapabilities(); err != nil {
			return err
		}
	}
	if cfg.Landlock {
		if err := applyLandlock(cfg); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if len(cfg.Seccomp) > 0 {
		if err := loadSeccomp(cfg.Seccomp); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	// Rlimits last: they also bind the helper from here on.
	for _, rl := range []struct {
		res int
		val uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, cfg.NoFile}, {unix.RLIMIT_FSIZE, cfg.FileSize}} {
		lim := syscall.Rlimit{Cur: rl.val, Max: rl.val}
		// syscall.Setrlimit (not unix) so that Go does not restore its
		// saved RLIMIT_NOFILE in the forked child.
		if err := syscall.Setrlimit(rl.res, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.res, err)
		}
	}
	return nil
}

// dropCapabilities empties the bounding and ambient sets and the
// inheritable set of this (locked) thread; the fork inherits them, and the
// setuid to a non-zero uid clears the permitted and effective sets.
func dropCapabilities() error {
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL { // past the last capability
				break
			}
			return fmt.Errorf("drop bounding cap %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// runCommand forks the user command and reaps until it exits.
func runCommand(cfg *helperConfig) helperStatus {
	path, err := lookPath(cfg.Args[0], cfg.Dir, cfg.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd: %v\n", err)
		code := 127
		if os.IsPermission(err) {
			code = 126
		}
		return helperStatus{Started: false, ExitCode: code}
	}
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if cfg.SetCreds {
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}}
	}
	pid, err := syscall.ForkExec(path, cfg.Args, attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd: exec %s: %v\n", cfg.Args[0], err)
		code := 127
		if err == syscall.EACCES || err == syscall.EPERM {
			code = 126
		}
		return helperStatus{ExitCode: code}
	}
	for {
		// A raw wait4 keeps this thread (and its P) blocked in the kernel:
		// the runtime never needs a new OS thread here, which it could not
		// get while a fork bomb holds every pid of the cgroup.
		var ws syscall.WaitStatus
		r1, _, errno := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)), 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return helperStatus{SetupError: "wait: " + errno.Error()}
		}
		wpid := int(r1)
		if wpid != pid {
			continue // an orphan reparented to us
		}
		switch {
		case ws.Exited():
			return helperStatus{Started: true, ExitCode: ws.ExitStatus()}
		case ws.Signaled():
			return helperStatus{Started: true, ExitCode: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
		}
	}
}

// lookPath resolves file like execvp, using the command's PATH inside the
// new root.
func lookPath(file, dir string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		check := file
		if !filepath.IsAbs(file) {
			check = filepath.Join(dir, file) // execve runs after the chdir
		}
		if err := checkExec(check); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return file, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	var firstErr error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		err := checkExec(p)
		if err == nil {
			return p, nil
		}
		if firstErr == nil && os.IsPermission(err) {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", fmt.Errorf("%s: %w", file, firstErr)
	}
	return "", fmt.Errorf("%s: command not found", file)
}

func checkExec(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return os.ErrPermission
	}
	return nil
}
