package local

import (
	"os"
	"syscall"
)

func fileUID(fi os.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }
