package egress

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// Defaults for zero Options fields.
const (
	DefaultDialTimeout        = 10 * time.Second
	DefaultIdleTimeout        = 2 * time.Minute
	DefaultMaxHeaderBytes     = 32 << 10
	DefaultMaxConnsPerSandbox = 64
)

// Resolver looks host names up. *net.Resolver implements it; tests inject
// their own answers.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configures a Proxy. Zero fields take the defaults above.
type Options struct {
	// Registerer receives the proxy's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds resolving and connecting to an origin.
	DialTimeout time.Duration
	// IdleTimeout closes a client connection idle between requests, an
	// origin that sends no response header, and a tunnel or forwarded
	// exchange with no bytes in either direction for this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header (431 beyond) and an origin's
	// response header.
	MaxHeaderBytes int
	// MaxConnsPerSandbox caps the connections one sandbox has open to the
	// proxy at once; further connections wait to be accepted.
	MaxConnsPerSandbox int
	// Protected are the addresses no sandbox may reach whatever its
	// tenant's policy says: sandboxd's own listeners and dependencies
	// (netclass.Protected; an address of this host protects its port on
	// every address of this host). nil: none.
	Protected *netclass.Protected
}

// Proxy is the egress proxy shared by all sandboxes. Safe for concurrent
// use.
type Proxy struct {
	opts Options
	log  *slog.Logger
	m    *metrics
}

// New returns a proxy. It fails only when registering its metrics fails.
func New(opts Options) (*Proxy, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.MaxConnsPerSandbox <= 0 {
		opts.MaxConnsPerSandbox = DefaultMaxConnsPerSandbox
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("egress: metrics: %w", err)
	}
	return &Proxy{opts: opts, log: opts.Logger, m: m}, nil
}

// Scope is who a sandbox is and what it may reach.
type Scope struct {
	Tenant  string
	Session string
	// Policy is the tenant's allowlist; nil allows nothing. It must not
	// change while a sandbox uses it.
	Policy *policy.EgressPolicy
	// Record, when set, receives one Event per request or tunnel, after it
	// ended (denials at once). It is called from the connection's
	// goroutine and must not block long.
	Record func(Event)
}

// Event is the audit record of one request or tunnel.
type Event struct {
	Time    time.Time // when the request arrived
	Tenant  string
	Session string
	Method  string // "CONNECT" for a tunnel
	Host    string // as asked for (canonical when valid)
	Port    int
	IP      netip.Addr // the address connected to, when one was
	Allowed bool
	// Rule is the index of the matching rule in Policy.Allow, -1 when none.
	Rule int
	// Reason says why the request was denied or failed; "" when it was
	// carried out.
	Reason string
	// Status is the HTTP status the sandbox received from the proxy or the
	// origin (200 for an established tunnel); 0 when none was sent.
	Status int
	// BytesOut and BytesIn are the bytes sent to and received from the
	// origin (headers included for plain http).
	BytesOut, BytesIn int64
	Duration          time.Duration
}

// For returns the runner.Egress serving one sandbox with scope s. Serve may
// be called any number of times, also concurrently (one listener each).
func (p *Proxy) For(s Scope) runner.Egress {
	e := &sandboxEgress{p: p, scope: s}
	if s.Policy != nil {
		if err := s.Policy.Validate(); err != nil {
			e.policyErr = err
		}
	}
	e.guard = netclass.NewGuard(s.Policy.PrivatePrefixes(), p.opts.Protected)
	e.dialer = &net.Dialer{Timeout: p.opts.DialTimeout, Control: e.guard.Control}
	e.dial = e.dialer.DialContext
	e.transport = e.newTransport()
	e.errLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	return e
}

// sandboxEgress is one sandbox's view of the proxy.
type sandboxEgress struct {
	p         *Proxy
	scope     Scope
	policyErr error
	// guard judges every address (netclass.Guard: the tenant's
	// allow_private_cidrs and sandboxd's own addresses).
	guard  *netclass.Guard
	dialer *net.Dialer
	// dial connects to a checked address (tests replace it).
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	transport *http.Transport
	errLog    *log.Logger // net/http's own complaints, at debug level
}

// Serve implements runner.Egress: it serves proxy connections accepted on
// l until l is closed, then closes every connection it still serves.
// Closing l is the normal way to stop it (nil is returned).
func (e *sandboxEgress) Serve(l net.Listener) error {
	ll := newLimitListener(l, e.p.opts.MaxConnsPerSandbox)
	h := &handler{e: e, tunnels: map[net.Conn]struct{}{}}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: e.p.opts.IdleTimeout,
		IdleTimeout:       e.p.opts.IdleTimeout,
		MaxHeaderBytes:    e.p.opts.MaxHeaderBytes,
		ErrorLog:          e.errLog,
		ConnState:         e.connState,
		ConnContext:       auditConnContext,
	}
	srv.SetKeepAlivesEnabled(true)
	err := srv.Serve(auditListener{ll})
	srv.Close()
	h.closeTunnels()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handler serves the requests of one Serve call.
type handler struct {
	e       *sandboxEgress
	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{} // hijacked clients and forwarded origins
}

// track registers a connection to close when Serve ends; false when it has
// ended.
func (h *handler) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.tunnels[c] = struct{}{}
	return true
}

func (h *handler) untrack(c net.Conn) {
	h.mu.Lock()
	delete(h.tunnels, c)
	h.mu.Unlock()
}

func (h *handler) closeTunnels() {
	h.mu.Lock()
	h.closed = true
	for c := range h.tunnels {
		c.Close()
	}
	h.mu.Unlock()
}

func (e *sandboxEgress) record(ev *Event) {
	e.p.m.record(ev)
	if e.scope.Record != nil {
		e.scope.Record(*ev)
	}
	e.p.log.Debug("egress", "tenant", ev.Tenant, "session", ev.Session, "method", ev.Method,
		"host", ev.Host, "port", ev.Port, "ip", ev.IP, "allowed", ev.Allowed, "rule", ev.Rule,
		"reason", ev.Reason, "status", ev.Status, "bytes_out", ev.BytesOut, "bytes_in", ev.BytesIn)
}
