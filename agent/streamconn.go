package agent

import (
	"io"
	"net"
	"sync"
	"time"
)

// StreamConn adapts a reader/writer pair (stdin/stdout of the agent, or
// the attach stream of a container on the sandboxd side) to a net.Conn.
// Deadlines are forwarded when r or w support SetReadDeadline /
// SetWriteDeadline (an *os.File pipe does) and ignored otherwise. Close
// closes r and w when they are io.Closers.
func StreamConn(r io.Reader, w io.Writer) net.Conn { return &streamConn{r: r, w: w} }

type streamConn struct {
	r    io.Reader
	w    io.Writer
	once sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func (c *streamConn) Close() error {
	var err error
	c.once.Do(func() {
		if cl, ok := c.w.(io.Closer); ok {
			err = cl.Close()
		}
		if cl, ok := c.r.(io.Closer); ok {
			if e := cl.Close(); err == nil {
				err = e
			}
		}
	})
	return err
}

type streamAddr struct{}

func (streamAddr) Network() string { return "stream" }
func (streamAddr) String() string  { return "stream" }

func (c *streamConn) LocalAddr() net.Addr  { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return streamAddr{} }

func (c *streamConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	if d, ok := c.r.(interface{ SetReadDeadline(time.Time) error }); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

func (c *streamConn) SetWriteDeadline(t time.Time) error {
	if d, ok := c.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}
