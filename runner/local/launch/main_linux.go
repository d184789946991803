package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main runs the launcher: it reads the Config, builds the sandbox and
// execs the agent; it returns only to exit with the status the caller
// passes to os.Exit (the setup error already written to StatusFD).
//
// Thread-scoped state (the capability bounding set, no_new_privs, the
// seccomp filter) is set on the locked main thread, the one that execs:
// the exec'd program inherits that thread's credentials.
func Main() int {
	runtime.LockOSThread()
	status := os.NewFile(StatusFD, "status")
	unix.CloseOnExec(ConfigFD)
	unix.CloseOnExec(StatusFD)
	// Nothing the runner might have leaked may reach the agent.
	_ = unix.CloseRange(StatusFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	err := run()
	if err == nil {
		return 0 // a probe
	}
	fmt.Fprint(status, err.Error())
	return 1
}

func run() error {
	var cfg Config
	b, err := io.ReadAll(os.NewFile(ConfigFD, "config"))
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if cfg.Probe {
		return nil
	}
	if len(cfg.Args) == 0 {
		return errors.New("config without a command")
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := buildRoot(&cfg); err != nil {
		return fmt.Errorf("build root: %w", err)
	}
	_ = unix.Sethostname([]byte("sandbox"))
	if cfg.Landlock {
		if err := applyLandlock(&cfg); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if err := limitCapabilities(cfg.KeepCaps); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if len(cfg.Seccomp) > 0 {
		if err := loadSeccomp(cfg.Seccomp); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	// Rlimits last: they bind the launcher too from here on.
	for _, rl := range []struct {
		res int
		val uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, cfg.NoFile}, {unix.RLIMIT_FSIZE, cfg.FileSize}} {
		lim := syscall.Rlimit{Cur: rl.val, Max: rl.val}
		// syscall.Setrlimit (not unix): Go then does not restore its
		// saved RLIMIT_NOFILE at the exec.
		if err := syscall.Setrlimit(rl.res, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.res, err)
		}
	}
	err = syscall.Exec(cfg.Args[0], cfg.Args, []string{})
	return fmt.Errorf("exec %s: %w", cfg.Args[0], err)
}

// loopbackUp brings lo up in the new network namespace (the agent's
// egress forwarder listens on it, and programs use it).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// limitCapabilities reduces this thread's bounding set to keep and
// empties its ambient and inheritable sets. The exec as uid 0 then gives
// the program exactly keep as its permitted and effective sets.
func limitCapabilities(keep uint64) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL { // past the last capability
				break
			}
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		data[i].Inheritable = 0
		data[i].Permitted &= uint32(keep >> (32 * i))
		data[i].Effective &= uint32(keep >> (32 * i))
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
