package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// loops attaches image files to loop devices. Other processes on the host
// (losetup, other sandboxd instances, container runtimes) allocate loop
// devices at the same time: LOOP_CTL_GET_FREE only names a device that was
// free a moment ago, so attach binds it with LOOP_CONFIGURE, which fails
// (EBUSY) instead of sharing a device someone else bound meanwhile, and
// then asks again.
type loops struct {
	// dir holds the images (unnamed, O_TMPFILE: a device's backing file
	// reads "<dir>/#<inode> (deleted)", which is how Cleanup knows its
	// own) and the device nodes made when /dev lacks them (a container's
	// /dev is a copy made at its start).
	dir string
}

// attachAttempts bounds the retries of a lost race for a free device.
const attachAttempts = 64

// newLoops checks that loop devices can be had here.
func newLoops(dir string) (*loops, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ctl.Close()
	return &loops{dir: dir}, nil
}

// attach binds img to a free loop device with autoclear (the device
// detaches itself when its last user closes it) and direct I/O (no second
// copy of the workspace's pages in the host's page cache), and returns the
// device open: the caller's descriptor keeps it bound until a mount holds
// it.
func (l *loops) attach(img *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	flags := uint32(unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO)
	for attempt := 1; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := l.open(n)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Size: 4096} // Size is the block size
		cfg.Info.Flags = flags
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) && flags&unix.LO_FLAGS_DIRECT_IO != 0 {
			// The image's filesystem cannot do direct I/O.
			flags &^= unix.LO_FLAGS_DIRECT_IO
			cfg.Info.Flags = flags
			err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		}
		if err == nil {
			return dev, nil
		}
		dev.Close()
		// EBUSY: bound by someone else since GET_FREE; ENXIO: being
		// removed. Both are a lost race: ask for another.
		if (errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENXIO)) && attempt < attachAttempts {
			continue
		}
		return nil, fmt.Errorf("bind loop%d: %w", n, err)
	}
}

// open opens /dev/loopN, or a node of it made in l.dir when /dev has none.
func (l *loops) open(n int) (*os.File, error) {
	name := "/dev/loop" + strconv.Itoa(n)
	f, err := os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	devno, err := loopDevno(n)
	if err != nil {
		return nil, err
	}
	node := filepath.Join(l.dir, "loop"+strconv.Itoa(n))
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(devno)); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("make a node for loop%d: %w", n, err)
	}
	return os.OpenFile(node, os.O_RDWR|unix.O_CLOEXEC, 0)
}

// loopDevno reads loopN's device number from sysfs ("7:3").
func loopDevno(n int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/dev", n))
	if err != nil {
		return 0, err
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b2, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("loop%d: bad device number %q", n, b)
	}
	return unix.Mkdev(uint32(a), uint32(b2)), nil
}

// ours lists the loop devices whose image is in l.dir.
func (l *loops) ours() []int {
	var out []int
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range ents {
		b, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(b), l.dir+"/") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "loop"))
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

// detach unbinds loopN. A device still in use (mounted somewhere) only
// gets autoclear: it detaches when its last user goes.
func (l *loops) detach(n int) error {
	dev, err := l.open(n)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach loop%d: %w", n, err)
	}
	return nil
}
