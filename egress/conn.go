package egress

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// closeWriter is implemented by *net.TCPConn and *net.UnixConn.
type closeWriter interface{ CloseWrite() error }

// idleConn fails reads and writes after idle without traffic in either
// direction: every operation pushes the deadline of both.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(b)
}

func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// pipe copies both ways until both directions ended. An EOF from one side
// half-closes the other (the sandbox finished sending; the origin may still
// answer); an error closes both.
func pipe(a, b net.Conn) error {
	var (
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err == nil {
			if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
				return
			}
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			once.Do(func() { first = err })
		}
		a.Close()
		b.Close()
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	return first
}

// limitListener accepts at most n connections at a time; Accept waits for
// one to close beyond that.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once closed and keeps half-close working.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
