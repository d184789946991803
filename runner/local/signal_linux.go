package local

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func unixSignalName(sig syscall.Signal) string { return unix.SignalName(sig) }

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
