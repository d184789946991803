package local

import (
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// landlockABI returns the kernel's Landlock ABI version (0: unavailable).
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// applyLandlock restricts file system access, after the root is built, to
// reading and executing everywhere plus writing to /tmp, /dev/shm, the
// writable device nodes and (read-write mode) /workspace. It is defence in
// depth behind the read-only mounts, so it is best effort.
func applyLandlock(cfg *helperConfig) error {
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs("/tmp", "/dev/shm"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"),
	}
	if cfg.WorkspaceRW {
		rules = append(rules, landlock.RWDirs("/workspace"))
	}
	return landlock.V7.BestEffort().RestrictPaths(rules...)
}
