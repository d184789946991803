package fake

import "golang.org/x/sys/unix"

func markInheritedCloexec() { _ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) }
