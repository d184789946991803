package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"time"
)

// ServeHTTP handles one request from the sandbox: a CONNECT tunnel or an
// absolute-form plain-http request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := h.e
	if ac, ok := r.Context().Value(auditConnKey{}).(*auditConn); ok {
		ac.handled()
	}
	ev := Event{Time: time.Now(), Tenant: e.scope.Tenant, Session: e.scope.Session, Method: r.Method, Rule: -1}
	defer func() {
		ev.Duration = time.Since(ev.Time)
		e.record(&ev)
	}()
	if r.Method == http.MethodConnect {
		h.tunnel(w, r, &ev)
		return
	}
	h.forward(w, r, &ev)
}

func (h *handler) fail(w http.ResponseWriter, ev *Event, d *denial) {
	ev.Allowed, ev.Reason, ev.Status = d.allowed, d.reason, d.status
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Connection", "close") // a refused client starts afresh
	w.WriteHeader(d.status)
	fmt.Fprintln(w, d.reason)
}

// forward carries one absolute-form http request to its origin.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, ev *Event) {
	e := h.e
	ev.Host = r.URL.Host
	if r.URL.Scheme == "" || r.URL.Host == "" || r.URL.Opaque != "" {
		h.fail(w, ev, &denial{status: http.StatusBadRequest,
			reason: "egress: this is an HTTP proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port"})
		return
	}
	if r.URL.Scheme != "http" {
		h.fail(w, ev, &denial{status: http.StatusBadRequest,
			reason: fmt.Sprintf("egress: scheme %q is not proxied: use CONNECT host:port for https", r.URL.Scheme)})
		return
	}
	host, port, err := splitTarget(r.URL.Host, 80)
	if err != nil {
		h.fail(w, ev, deny("egress denied: invalid host: %v", err))
		return
	}
	up := h.dial(w, r, ev, r.Method, host, port)
	if up == nil {
		return
	}
	defer func() {
		up.Close()
		ev.BytesOut, ev.BytesIn = up.out.Load(), up.in.Load()
	}()
	// The server's Close does not reach an exchange ReverseProxy took over
	// (an upgrade to WebSocket hijacks the client connection): closing the
	// origin side ends it when Serve ends.
	if !h.track(up) {
		h.fail(w, ev, &denial{status: http.StatusServiceUnavailable, allowed: true, reason: "egress: proxy stopped"})
		return
	}
	defer h.untrack(up)
	sw := &statusWriter{ResponseWriter: w}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = r.URL.Host
			pr.Out.URL.User = nil // never turned into credentials
			pr.Out.Host = r.URL.Host
			for k := range pr.Out.Header {
				if strings.HasPrefix(k, "Proxy-") {
					delete(pr.Out.Header, k)
				}
			}
		},
		Transport: e.transport,
		ModifyResponse: func(resp *http.Response) error {
			for k := range resp.Header {
				if strings.HasPrefix(k, "Proxy-") {
					delete(resp.Header, k)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			reason := "egress: origin failed: " + err.Error()
			status := http.StatusBadGateway
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				status = http.StatusGatewayTimeout
			}
			ev.Reason = reason
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			fmt.Fprintln(w, reason)
		},
		ErrorLog: e.errLog,
	}
	ctx := context.WithValue(r.Context(), upstreamKey{}, up)
	rp.ServeHTTP(sw, r.WithContext(ctx))
	ev.Status = sw.status
}

// dial decides method to host:port for the sandbox and connects to an
// address that passed the checks. A refusal or failure is answered on w
// and recorded in ev, and dial returns nil.
func (h *handler) dial(w http.ResponseWriter, r *http.Request, ev *Event, method, host string, port int) *upstream {
	e := h.e
	ev.Host, ev.Port = host, port
	ips, rule, d := e.decide(r.Context(), method, host, port)
	ev.Rule = rule
	if d == nil {
		var conn net.Conn
		conn, ev.IP, d = e.connect(r.Context(), ips, port)
		if d == nil {
			ev.Allowed = true
			return newUpstream(conn, e.p.opts.IdleTimeout)
		}
	}
	h.fail(w, ev, d)
	return nil
}

// tunnel serves CONNECT host:port.
func (h *handler) tunnel(w http.ResponseWriter, r *http.Request, ev *Event) {
	e := h.e
	ev.Host = r.RequestURI
	host, port, err := splitTarget(r.RequestURI, 0)
	if err != nil {
		h.fail(w, ev, deny("egress denied: invalid CONNECT target: %v", err))
		return
	}
	up := h.dial(w, r, ev, http.MethodConnect, host, port)
	if up == nil {
		return
	}
	defer func() {
		up.Close()
		ev.BytesOut, ev.BytesIn = up.out.Load(), up.in.Load()
	}()
	hj, ok := w.(http.Hijacker)
	if !ok {
		h.fail(w, ev, &denial{status: http.StatusInternalServerError, allowed: true, reason: "egress: connection cannot be hijacked"})
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		ev.Reason = "egress: hijack: " + err.Error()
		return
	}
	defer client.Close()
	if !h.track(client) {
		ev.Reason = "egress: proxy stopped"
		return
	}
	defer h.untrack(client)
	cl := &idleConn{Conn: client, idle: e.p.opts.IdleTimeout}
	if _, err := io.WriteString(cl, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		ev.Reason = "egress: write to sandbox: " + err.Error()
		return
	}
	ev.Status = http.StatusOK
	// Bytes the client sent after the CONNECT head (a pipelined TLS
	// ClientHello) are already buffered.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			ev.Reason = "egress: write to origin: " + err.Error()
			return
		}
	}
	if err := pipe(cl, up); err != nil {
		ev.Reason = "egress: tunnel: " + err.Error()
	}
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 || s.status < 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (used by ReverseProxy for flushing
// and upgrades) reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// upstreamKey carries the connection already dialled to the checked
// address from forward to the transport's DialContext.
type upstreamKey struct{}

func (e *sandboxEgress) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			up, _ := ctx.Value(upstreamKey{}).(*upstream)
			if up == nil || !up.taken.CompareAndSwap(false, true) {
				return nil, errors.New("no checked connection for this request")
			}
			return up, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		ResponseHeaderTimeout:  e.p.opts.IdleTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: int64(e.p.opts.MaxHeaderBytes),
	}
}

// upstream is a connection to an origin: it counts bytes and closes after
// IdleTimeout without traffic.
type upstream struct {
	idleConn
	taken   atomic.Bool
	in, out atomic.Int64
}

func newUpstream(c net.Conn, idle time.Duration) *upstream {
	return &upstream{idleConn: idleConn{Conn: c, idle: idle}}
}

func (u *upstream) Read(b []byte) (int, error) {
	n, err := u.idleConn.Read(b)
	u.in.Add(int64(n))
	return n, err
}

// Write counts before writing: the transport writes from its own
// goroutine, and the origin's answer (and so the end of the exchange, which
// reads the count) may come before that goroutine runs again.
func (u *upstream) Write(b []byte) (int, error) {
	u.out.Add(int64(len(b)))
	n, err := u.idleConn.Write(b)
	if n < len(b) {
		u.out.Add(int64(n - len(b)))
	}
	return n, err
}
