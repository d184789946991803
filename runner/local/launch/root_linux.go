package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// hostSystemDirs are bound read-only into a host-view root (when present).
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// rootDirs are the mount points every root needs (an image must have
// them: its root is read-only).
var rootDirs = []string{"proc", "dev", "tmp", "run"}

const roBindFlags = unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV

// buildRoot assembles the sandbox root at cfg.Root inside the launcher's
// private mount namespace and pivots into it: the image or the host's
// system directories read-only, /workspace, a sized /tmp, a minimal /dev
// with a sized /dev/shm, /proc with the masked paths, and a read-only /run
// tmpfs holding the agent binary (read-only) and the agent's directory.
// Nothing is mounted in the host's namespace.
func buildRoot(cfg *Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	root := cfg.Root
	if cfg.Rootfs != "" {
		if err := unix.Mount(cfg.Rootfs, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind rootfs: %w", err)
		}
		for _, d := range rootDirs {
			if _, err := os.Stat(filepath.Join(root, d)); err != nil {
				return fmt.Errorf("rootfs lacks mount point /%s", d)
			}
		}
	} else {
		if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
			return fmt.Errorf("mount root tmpfs: %w", err)
		}
		for _, d := range rootDirs {
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
		for _, src := range hostSystemDirs {
			fi, err := os.Lstat(src)
			if err != nil {
				continue
			}
			dst := filepath.Join(root, src)
			if fi.Mode()&os.ModeSymlink != 0 {
				target, err := os.Readlink(src)
				if err != nil {
					return err
				}
				if err := os.Symlink(target, dst); err != nil {
					return err
				}
				continue
			}
			if !fi.IsDir() {
				continue
			}
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := bindRO(src, dst); err != nil {
				return err
			}
		}
	}
	if cfg.Workspace != "" {
		dst := filepath.Join(root, "workspace")
		if cfg.Rootfs == "" {
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
		} else if _, err := os.Stat(dst); err != nil {
			return fmt.Errorf("rootfs lacks mount point /workspace")
		}
		if err := unix.Mount(cfg.Workspace, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind workspace: %w", err)
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
		if cfg.WorkspaceMode != WorkspaceReadWrite {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", dst, "", flags, ""); err != nil {
			return fmt.Errorf("remount workspace: %w", err)
		}
	}
	tmpOpts := "mode=1777,size=" + strconv.FormatInt(cfg.TmpBytes, 10) + ",nr_inodes=" + strconv.FormatInt(cfg.TmpInodes, 10)
	if err := unix.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := buildDev(filepath.Join(root, "dev"), tmpOpts); err != nil {
		return fmt.Errorf("build /dev: %w", err)
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := buildRun(cfg, filepath.Join(root, "run")); err != nil {
		return fmt.Errorf("build /run: %w", err)
	}
	if err := maskPaths(root, cfg.Masked, cfg.ReadOnly); err != nil {
		return err
	}
	if err := pivot(root); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", roBindFlags, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// buildRun mounts a tmpfs at run (root's, 0755) with the agent binary
// bound read-only at AgentBinary and the runner's directory at AgentDir
// (mode 0700, root's: closed to the code), then makes the tmpfs itself
// read-only.
func buildRun(cfg *Config, run string) error {
	if err := unix.Mount("tmpfs", run, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return err
	}
	bin := filepath.Join(run, filepath.Base(filepath.Dir(AgentBinary)))
	if err := os.Mkdir(bin, 0o755); err != nil {
		return err
	}
	agent := filepath.Join(bin, filepath.Base(AgentBinary))
	if err := os.WriteFile(agent, nil, 0o755); err != nil {
		return err
	}
	if err := bindRO(cfg.AgentPath, agent); err != nil {
		return err
	}
	dir := filepath.Join(run, filepath.Base(AgentDir))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(cfg.RunDir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", AgentDir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount %s: %w", AgentDir, err)
	}
	return unix.Mount("", run, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

func bindRO(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", roBindFlags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", src, err)
	}
	return nil
}

func buildDev(dev, tmpOpts string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom"} {
		dst := filepath.Join(dev, n)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount /dev/%s: %w", n, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, tmpOpts); err != nil {
		return err
	}
	// The /dev tmpfs itself becomes read-only; the device binds and
	// /dev/shm are separate mounts and stay usable.
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// maskPaths applies the isolation's masked paths (a directory: an empty
// read-only tmpfs over it; a file: /dev/null) and read-only paths under
// root. Paths the sandbox lacks (this root has no /sys) are skipped.
func maskPaths(root string, masked, readOnly []string) error {
	for _, m := range masked {
		p := filepath.Join(root, m)
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	for _, m := range readOnly {
		p := filepath.Join(root, m)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := bindRO(p, p); err != nil {
			return err
		}
	}
	return nil
}

// pivot makes root the new / and detaches the old root.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return nil
}
