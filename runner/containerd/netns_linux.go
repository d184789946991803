package containerd

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// newNetns creates a network namespace holding only the loopback
// interface, brought up, and pins it by bind-mounting it on path (a new
// file). The sandbox joins it by path: a new namespace created by runc
// would have lo down, and the sandbox user lacks CAP_NET_ADMIN to raise
// it. Remove it with removeNetns.
func newNetns(path string) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			removeNetns(path)
		}
	}()

	errc := make(chan error, 1)
	// A dedicated OS thread enters the new namespace; if it cannot get
	// back it stays locked and dies with its goroutine.
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = setupNetns(path)
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to host netns: %w", serr))
			return // the thread stays locked: the runtime ends it
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	return nil
}

// setupNetns runs on a thread inside the new namespace.
func setupNetns(path string) error {
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
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
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// removeNetns unmounts and deletes a namespace made by newNetns. A missing
// path is not an error.
func removeNetns(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns: unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns: %w", err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir (netns pins of
// sandboxes left by a crashed process) so the dir can be removed.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var errs []error
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, prefix) {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				out.WriteByte(v)
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
