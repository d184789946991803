package local

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runner"
)

// NetworkEgress without a forwarder: each Exec's helper, still privileged
// in the fresh network namespace, brings lo up, binds a listening TCP
// socket to runner.EgressProxyAddr there, and passes the socket to the
// runner over an inherited unix socketpair (SCM_RIGHTS) before anything
// sandboxed runs. The runner accepts connections on it directly (a socket
// keeps the namespace it was created in), so programs in the sandbox
// connect to 127.0.0.1:3128 on their own loopback and the runner receives
// those connections on the host side. The connections of every Exec are
// merged into one listener per sandbox (fanIn), served by SandboxSpec.Egress
// from Create to Close. Nothing of the host is reachable or even visible
// inside: no socket file, no route, no second process.

// helperEgressFD is the helper's end of the socketpair the listening
// socket travels back on.
const helperEgressFD = 5

// egressProxyAddr is runner.EgressProxyAddr parsed.
var egressProxyAddr = netip.MustParseAddrPort(runner.EgressProxyAddr)

// setupEgressListener runs in the helper: lo up, listen on the proxy
// address in this network namespace, send the socket to the runner.
func setupEgressListener(addr netip.AddrPort) error {
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(ctl)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(ctl, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(ctl, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	if !addr.Addr().Is4() {
		return fmt.Errorf("egress proxy address %s is not IPv4", addr)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		return fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := unix.Sendmsg(helperEgressFD, []byte{1}, unix.UnixRights(fd), nil, 0); err != nil {
		return fmt.Errorf("send listener: %w", err)
	}
	unix.Close(helperEgressFD)
	return nil
}

// egressPair returns the runner's end (non-blocking, for the poller) and
// the helper's end of the socketpair the listener travels on.
func egressPair() (runnerEnd, helperEnd *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("egress socketpair: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("egress socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "egress-runner"), os.NewFile(uintptr(fds[1]), "egress-helper"), nil
}

// receiveEgressListener reads the helper's listening socket from the
// runner's end of the socketpair. It fails when the helper ended without
// sending one.
func receiveEgressListener(f *os.File) (net.Listener, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if n == 0 {
		return nil, fmt.Errorf("helper ended without an egress listener")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("egress listener: bad control message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("egress listener: expected one descriptor (%v)", err)
	}
	lf := os.NewFile(uintptr(fds[0]), "egress-listener")
	defer lf.Close()
	return net.FileListener(lf)
}

// execEgress carries one Exec's proxy connections into the sandbox's
// fanIn until stop.
func execEgress(f *os.File, fan *fanIn, stop <-chan struct{}) {
	defer f.Close()
	l, err := receiveEgressListener(f)
	if err != nil {
		return // the helper failed; it reports why
	}
	go func() {
		<-stop
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fan.push(c, stop)
	}
}

// fanIn is a net.Listener fed by the per-Exec listeners of one sandbox.
type fanIn struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var _ net.Listener = (*fanIn)(nil)

func newFanIn() *fanIn {
	return &fanIn{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (f *fanIn) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

// push hands c to Accept, or closes it when the sandbox or the Exec ends
// first.
func (f *fanIn) push(c net.Conn, stop <-chan struct{}) {
	select {
	case f.conns <- c:
	case <-f.done:
		c.Close()
	case <-stop:
		c.Close()
	}
}

func (f *fanIn) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

func (f *fanIn) Addr() net.Addr {
	return &net.TCPAddr{IP: egressProxyAddr.Addr().AsSlice(), Port: int(egressProxyAddr.Port())}
}
