package agent

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// TokenBytes is the length of the secret that authenticates a TCP
// connection to an agent (the Kubernetes runner's channel): the client
// sends it first, the agent serves the connection only when it matches.
const TokenBytes = 32

// tokenTimeout bounds how long an accepted connection may take to send
// its token.
const tokenTimeout = 5 * time.Second

// TokenListener wraps l (a TCP listener) so that Accept returns only
// connections whose first TokenBytes bytes equal token (compared in
// constant time); any other connection is closed unread beyond that. The
// handshake of one connection never delays another's.
func TokenListener(l net.Listener, token []byte) (net.Listener, error) {
	if len(token) != TokenBytes {
		return nil, fmt.Errorf("agent: token of %d bytes, want %d", len(token), TokenBytes)
	}
	tl := &tokenListener{Listener: l, token: append([]byte(nil), token...), ready: make(chan net.Conn), done: make(chan struct{})}
	go tl.loop()
	return tl, nil
}

type tokenListener struct {
	net.Listener
	token []byte
	ready chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error
}

func (tl *tokenListener) loop() {
	for {
		c, err := tl.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			tl.err = err
			tl.once.Do(func() { close(tl.done) })
			return
		}
		go func() {
			if !checkToken(c, tl.token) {
				c.Close()
				return
			}
			select {
			case tl.ready <- c:
			case <-tl.done:
				c.Close()
			}
		}()
	}
}

func checkToken(c net.Conn, token []byte) bool {
	c.SetReadDeadline(time.Now().Add(tokenTimeout))
	got := make([]byte, len(token))
	if _, err := io.ReadFull(c, got); err != nil {
		return false
	}
	c.SetReadDeadline(time.Time{})
	return subtle.ConstantTimeCompare(got, token) == 1
}

func (tl *tokenListener) Accept() (net.Conn, error) {
	select {
	case c := <-tl.ready:
		return c, nil
	case <-tl.done:
		return nil, tl.err
	}
}

func (tl *tokenListener) Close() error {
	err := tl.Listener.Close()
	return err
}

// DialToken connects to an agent's TCP address and authenticates with
// token, retrying until ctx ends (the pod may still be starting). A wrong
// token shows as a connection the agent closes: the first request fails.
func DialToken(ctx context.Context, addr string, token []byte) (*Client, error) {
	if len(token) != TokenBytes {
		return nil, fmt.Errorf("agent: token of %d bytes, want %d", len(token), TokenBytes)
	}
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			if _, err = conn.Write(token); err == nil {
				return NewClient(conn), nil
			}
			conn.Close()
		}
		t := time.NewTimer(dialRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial agent %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
	}
}
