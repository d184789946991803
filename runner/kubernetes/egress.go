package kubernetes

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

// The http effect without giving the pod egress: sandboxd keeps a few
// idle connections open to the agent's reverse egress port (token
// authenticated, admitted by the NetworkPolicy only from sandboxd); when
// the code connects to its proxy at 127.0.0.1:3128 the agent takes one,
// says so with agent.ReverseTaken and carries the proxy connection on it;
// sandboxd then hands that connection to the sandbox's runner.Egress as
// if accepted on the containerd runner's egress socket, and opens the
// next idle one.

// reverseIdle is how many idle reverse connections each sandbox keeps.
const reverseIdle = 4

// chanListener is a net.Listener of the connections the pump hands over.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// pumpEgress keeps reverseIdle connections to addr open until ctx ends,
// handing each one the agent takes to l.
func pumpEgress(ctx context.Context, addr string, token []byte, l *chanListener) {
	for range reverseIdle {
		go func() {
			for ctx.Err() == nil {
				c, err := dialReverse(ctx, addr, token)
				if err != nil {
					select {
					case <-ctx.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				select {
				case l.conns <- c:
				case <-l.done:
					c.Close()
					return
				}
			}
		}()
	}
}

// dialReverse opens one reverse connection and waits until the agent
// takes it.
func dialReverse(ctx context.Context, addr string, token []byte) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write(token); err != nil {
		c.Close()
		return nil, err
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil || b[0] != agent.ReverseTaken {
		c.Close()
		if err == nil {
			err = errors.New("reverse egress: unexpected byte from the agent")
		}
		return nil, err
	}
	return c, nil
}

func reverseAddr(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port+1)) }
