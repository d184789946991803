package egress

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// net/http answers some requests itself, before any handler runs: a
// malformed request line or header (400), a header over MaxHeaderBytes
// (431), an unknown transfer coding (501). A sandbox's attempt must still be
// audited, so every connection is wrapped: it remembers the start of what
// the sandbox sent since the connection was last idle, and the status of
// what net/http wrote back. A request that became active but never reached
// ServeHTTP is recorded when its connection closes.

// auditMaxCapture bounds the bytes kept of a request's start.
const auditMaxCapture = 256

type auditListener struct{ net.Listener }

func (l auditListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &auditConn{Conn: c, capturing: true}, nil
}

type auditConn struct {
	net.Conn
	mu        sync.Mutex
	capturing bool      // between requests: keep what is read
	head      []byte    // the start of the request being read
	started   time.Time // when its first byte arrived
	pending   bool      // active, and no handler has run for it
	status    int       // what net/http answered for it
}

func (c *auditConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if c.capturing {
			if len(c.head) == 0 {
				c.started = time.Now()
			}
			if room := auditMaxCapture - len(c.head); room > 0 {
				c.head = append(c.head, b[:min(n, room)]...)
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *auditConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.pending && c.status == 0 {
		c.status = parseStatusLine(b)
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// CloseWrite keeps half-close working through the wrapper.
func (c *auditConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// handled marks the active request as having reached the handler.
func (c *auditConn) handled() {
	c.mu.Lock()
	c.pending = false
	c.mu.Unlock()
}

// state follows http.Server's ConnState. It returns the event to record
// when a request that never reached the handler ends with the connection.
func (c *auditConn) state(s http.ConnState) (head []byte, started time.Time, status int, unhandled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew, http.StateIdle:
		c.capturing, c.head, c.pending, c.status = true, c.head[:0], false, 0
	case http.StateActive:
		c.capturing, c.pending, c.status = false, true, 0
	case http.StateHijacked:
		c.capturing, c.pending = false, false
	case http.StateClosed:
		if c.pending {
			c.pending = false
			return c.head, c.started, c.status, true
		}
	}
	return nil, time.Time{}, 0, false
}

// parseStatusLine reads the status code of "HTTP/1.1 431 ...", 0 when b
// does not start with one.
func parseStatusLine(b []byte) int {
	const prefix = "HTTP/1.1 "
	if len(b) < len(prefix)+3 || string(b[:len(prefix)]) != prefix {
		return 0
	}
	code, err := strconv.Atoi(string(b[len(prefix) : len(prefix)+3]))
	if err != nil {
		return 0
	}
	return code
}

// requestStart reads the method and target of a captured request start, as
// far as they are printable; "" for what is not.
func requestStart(head []byte) (method, target string) {
	line := string(head)
	if i := strings.IndexAny(line, "\r\n"); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(line)
	clean := func(s string, max int) string {
		if len(s) > max {
			s = s[:max]
		}
		for _, r := range s {
			if r <= ' ' || r > '~' {
				return ""
			}
		}
		return s
	}
	if len(fields) > 0 {
		method = clean(fields[0], 16)
	}
	if len(fields) > 1 && method != "" {
		target = clean(fields[1], 128)
	}
	return method, target
}

// auditConnKey carries a request's *auditConn from ConnContext to
// ServeHTTP.
type auditConnKey struct{}

func auditConnContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*auditConn); ok {
		return context.WithValue(ctx, auditConnKey{}, ac)
	}
	return ctx
}

// connState records a request net/http refused before the handler.
func (e *sandboxEgress) connState(c net.Conn, s http.ConnState) {
	ac, ok := c.(*auditConn)
	if !ok {
		return
	}
	head, started, status, unhandled := ac.state(s)
	if !unhandled {
		return
	}
	method, target := requestStart(head)
	reason := "egress denied: incomplete request (the connection closed before the request was read whole)"
	if status != 0 {
		reason = "egress denied: malformed request: " + strconv.Itoa(status) + " " + http.StatusText(status)
	}
	if started.IsZero() {
		started = time.Now()
	}
	ev := Event{Time: started, Tenant: e.scope.Tenant, Session: e.scope.Session, Method: method,
		Host: target, Rule: -1, Reason: reason, Status: status, Duration: time.Since(started)}
	e.record(&ev)
}
