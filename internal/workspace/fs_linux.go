package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fsMaker formats and mounts workspace filesystems.
type fsMaker struct {
	loops *loops
	// tmpl copies formatted templates (mke2fs once per Limits). Its
	// prezeroed: mke2fs knows -E assume_storage_prezeroed (1.47+), so a
	// fresh sparse image needs neither zeroed inode tables nor the
	// kernel's lazy init writing them later; older ones get
	// lazy_itable_init and the noinit_itable mount option (same effect).
	tmpl *templates
}

// imageDir is where, below Root, the (unnamed) image files are created, so
// that a loop device's backing file names the instance that owns it.
const imageDir = ".images"

func newFSMaker(root string) (*fsMaker, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not running as root")
	}
	mke2fs, err := lookSbin("mke2fs")
	if err != nil {
		return nil, err
	}
	images := filepath.Join(root, imageDir)
	if err := os.MkdirAll(images, 0o700); err != nil {
		return nil, err
	}
	out, _ := exec.Command(mke2fs, "-V").CombinedOutput()
	f := &fsMaker{tmpl: &templates{dir: images, mke2fs: mke2fs, prezeroed: versionAtLeast(string(out), 1, 47)}}
	if f.loops, err = newLoops(images); err != nil {
		return nil, err
	}
	return f, nil
}

// lookSbin finds a system tool also when PATH lacks the sbin directories.
func lookSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// versionAtLeast reads "mke2fs 1.47.0 (5-Feb-2023)" from mke2fs -V.
func versionAtLeast(out string, major, minor int) bool {
	_, rest, ok := strings.Cut(out, "mke2fs ")
	if !ok {
		return false
	}
	a, rest, ok1 := leadingInt(rest)
	if !ok1 || !strings.HasPrefix(rest, ".") {
		return false
	}
	b, _, ok2 := leadingInt(rest[1:])
	return ok2 && (a > major || (a == major && b >= minor))
}

func leadingInt(s string) (int, string, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	return n, s[i:], err == nil
}

// make creates an unnamed sparse image of l.Bytes holding a fresh
// filesystem of l (a copy of its template), attaches it to a loop device
// (autoclear) and mounts it nosuid,nodev at dir, owned by the code's uid.
// The loop device detaches itself once dir is unmounted, and the image's
// blocks are freed with it.
func (f *fsMaker) make(ctx context.Context, dir string, l Limits) error {
	img, err := os.OpenFile(f.loops.dir, os.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("image file: %w", err)
	}
	defer img.Close()
	if err := f.tmpl.fill(ctx, img, l); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dev, err := f.loops.attach(img)
	if err != nil {
		return err
	}
	// Until the mount holds the device, this descriptor does: closing
	// it earlier (or dying) detaches the device (autoclear).
	defer dev.Close()
	data := "discard"
	if !f.tmpl.prezeroed {
		data += ",noinit_itable"
	}
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev.Name(), dir, err)
	}
	// mke2fs's lost+found would show in every listing; fsck is never run
	// on a workspace.
	if err := unix.Rmdir(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, unix.ENOENT) {
		_ = unmount(dir)
		return fmt.Errorf("remove lost+found: %w", err)
	}
	return nil
}

// readOnlyBind mounts a read-only, nosuid, nodev bind of src at dst.
func readOnlyBind(src, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := Bind(src, dst, true); err != nil {
		_ = os.Remove(dst)
		return err
	}
	return nil
}

// Bind mounts a nosuid, nodev bind of the workspace src at the existing
// directory dst, read-only when readOnly: a second mount of the same
// filesystem, which keeps it (and its loop device) alive after src is
// released. On error nothing is mounted at dst.
func Bind(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		_ = unmount(dst)
		return fmt.Errorf("remount %s nosuid,nodev: %w", dst, err)
	}
	return nil
}

// Unbind unmounts dst (what Bind mounted), lazily when it is busy. Not
// mounted is not an error.
func Unbind(dst string) error {
	err := unix.Unmount(dst, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		return unmount(dst)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dst, err)
	}
	return nil
}

// unmount detaches the mount at dir (lazily: a process still inside keeps
// it alive, invisible, until it leaves). Not mounted is not an error.
func unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

func unmountAndRemove(dir string) error {
	if err := unmount(dir); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Still mounted (stacked mounts) or not empty: say what is there.
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
