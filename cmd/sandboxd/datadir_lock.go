package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// lockFileName is the data dir's lock: one sandboxd process per data dir.
const lockFileName = "sandboxd.lock"

// errDataDirLocked says another live process holds the data dir.
var errDataDirLocked = errors.New("data dir in use")

// lockDataDir takes the exclusive lock of dir (flock on dir/sandboxd.lock,
// created if missing) and writes this process's pid into the file. The
// lock lasts until release or the process's end, whatever way it ends
// (the kernel drops it with the last descriptor; the descriptor is
// close-on-exec, so sandboxes and helpers never hold it). A data dir
// another process holds is refused at once with an error naming that
// process's pid (errDataDirLocked); nothing else in dir is read or
// changed.
func lockDataDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir lock %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %s is locked by another sandboxd (%s); stop it or give this one another --data-dir",
			errDataDirLocked, dir, holder(path))
	}
	// The holder's pid, for the message of the next one. A crash leaves
	// the file (and a stale pid in it) but no lock.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// holder describes the process holding the lock at path from the pid it
// wrote. The holder writes it just after taking the lock: an empty file is
// read again for a moment.
func holder(path string) string {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil && perr == nil && pid > 0 {
			return "pid " + strconv.Itoa(pid)
		}
		if time.Now().After(deadline) {
			return "pid unknown: " + path + " holds none"
		}
	}
}
