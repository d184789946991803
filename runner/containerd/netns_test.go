package containerd

import (
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsLinks lists the interfaces of the namespace pinned at path and
// whether lo is up, from a thread that enters it.
func netnsLinks(path string) (names []string, loUp bool, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, e := os.Open("/proc/thread-self/ns/net")
		if e != nil {
			err = e
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		f, e := os.Open(path)
		if e != nil {
			err = e
			runtime.UnlockOSThread()
			return
		}
		defer f.Close()
		if e := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); e != nil {
			err = e
			runtime.UnlockOSThread()
			return
		}
		ifs, e := net.Interfaces()
		err = e
		for _, i := range ifs {
			names = append(names, i.Name)
			if i.Name == "lo" {
				loUp = i.Flags&net.FlagUp != 0
			}
		}
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	return names, loUp, err
}
