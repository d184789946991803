package agent

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// procs tracks the pids the agent started itself, so that the pid-1
// reaper (Reap) never collects their exit status before exec.Cmd.Wait.
// Starting under the same lock the reaper holds while it peeks closes
// the race of a child exiting before it is registered.
var procs = procTable{pids: make(map[int]struct{})}

type procTable struct {
	mu   sync.Mutex
	pids map[int]struct{}
}

// start runs cmd.Start and registers the pid; call done after Wait.
func (t *procTable) start(cmd *exec.Cmd) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := cmd.Start()
	redumpable()
	if err != nil {
		return err
	}
	t.pids[cmd.Process.Pid] = struct{}{}
	return nil
}

func (t *procTable) done(pid int) {
	t.mu.Lock()
	delete(t.pids, pid)
	t.mu.Unlock()
}

// Reap collects orphaned children that are re-parented to the agent when
// it runs as pid 1 (or as a child subreaper), until ctx ends. Children the
// agent started itself are left to their own Wait. It runs on SIGCHLD and
// once a second as a backstop: an own child that is a zombie hides the
// ones behind it from the non-consuming peek until its Wait has run.
func Reap(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		reapOnce()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
	}
}

func reapOnce() {
	for {
		procs.mu.Lock()
		pid := peekZombie()
		if pid <= 0 {
			procs.mu.Unlock()
			return
		}
		if _, own := procs.pids[pid]; own {
			procs.mu.Unlock()
			return
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		procs.mu.Unlock()
	}
}

// peekZombie returns the pid of an exited child without reaping it, 0 if
// there is none.
func peekZombie() int {
	var info [128]byte // siginfo_t; si_pid at offset 16 on 64-bit Linux
	const pAll = 0
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(*(*int32)(unsafe.Pointer(&info[16])))
}
