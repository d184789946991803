// Package egress is sandboxd's host-side egress proxy: the only way out of a
// sandbox with the http effect.
//
// A NetworkEgress sandbox has no route out. An HTTP proxy address inside it
// (runner.EgressProxyAddr, 127.0.0.1:3128) is forwarded, byte for byte, over
// a unix socket private to that sandbox to the runner.Egress that
// (*Proxy).For returns. The socket is the sandbox's identity: whoever
// connects to it is that sandbox, with that Scope (tenant, session, egress
// policy), so there is no proxy authentication.
//
// # Protocol
//
// HTTP/1.1 proxy requests only:
//
//   - absolute-form requests for plain http ("GET http://host/path
//     HTTP/1.1") are forwarded to the origin. Hop-by-hop headers (Connection
//     and the headers it names, Keep-Alive, TE, Trailer, Transfer-Encoding,
//     Upgrade) and every Proxy-* header are removed; the client connection
//     is kept alive and every request on it is decided anew. Each request
//     gets its own upstream connection. A protocol upgrade (WebSocket) the
//     origin accepts with 101 becomes a two-way byte stream, like a tunnel.
//   - "CONNECT host:port" opens a tunnel (for https): after "200 Connection
//     established" bytes pass unchanged both ways, half-close aware, until
//     both sides finish or the tunnel is idle for Options.IdleTimeout.
//
// Anything else (origin-form requests, https:// absolute-form, other
// schemes) is refused with 400.
//
// # Decisions
//
// For each request or tunnel: the host is canonicalised (policy.CanonicalHost:
// lower case, no trailing dot, ASCII/punycode only, IPv4 in dotted decimal
// only); the tenant's allowlist must match method, host and port
// (policy.EgressPolicy.Match; a CONNECT is matched with the method
// "CONNECT", so a rule that lists methods must list CONNECT to allow
// https); the host is resolved once through Options.Resolver and every
// address is checked by the tenant's netclass.Guard: the unspecified
// addresses (0.0.0.0/8, ::, which connect to this host) and IPv6 forms
// carrying them or IPv4 loopback are refused always, as are sandboxd's own
// addresses (Options.Protected); loopback, private, link-local, CGNAT,
// cloud metadata, multicast, reserved and IPv6 forms carrying such IPv4
// addresses are refused unless inside the policy's AllowPrivateCIDRs
// (cloud metadata addresses only when listed as a single address). The
// connection goes to exactly an address that passed (no second lookup:
// DNS rebinding cannot swap it), and the dialer checks the socket address
// once more before connect(2) (Guard.Control).
//
// A refusal is an HTTP 403 with a plain-text body saying why ("egress
// denied: ..."); a failure to resolve or connect is a 502, a timeout 504.
// Every decision is recorded through Scope.Record, also for requests
// net/http refuses before any handler runs (a malformed or oversized
// header, a request cut off), and counted in
// sandboxd_egress_requests_total{tenant,decision}; bytes exchanged with
// origins in sandboxd_egress_bytes_total{tenant,direction}. When the
// sandbox's listener closes, Serve ends every connection it still serves:
// requests, tunnels and upgraded exchanges.
package egress
