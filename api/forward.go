package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
)

// Forwarding between replicas. With several replicas on one store, a
// session's sandbox, a running job and an MCP session live in one
// replica's memory. A request for one of them that reaches another replica
// is forwarded to the owner's internal address (Lease.Address) and its
// answer streamed back unchanged (status, headers, body; SSE and long
// waits as they come), so clients need no stickiness.
//
// The forward is authenticated with an HMAC-SHA256 under the cluster's
// shared secret (replica_secret) over the method, the request URI, the
// sending and the receiving replica, a timestamp, a nonce, the caller's
// principal (tenant, operator) and the body: the SHA-256 of a body read
// already (a submit's) is signed with the headers; a streamed one's is
// sent in a trailer, MACed with the header signature, so a body streams
// through (a 256 MiB archive is not buffered); either is refused when it
// ends altered.
// The owner accepts a forward only addressed to itself, within
// forwardWindow of its clock, with a nonce it has not seen; the caller's
// API key is not forwarded: the identity the owner serves is the one in
// the envelope, which only a replica can sign. A forwarded request is
// never forwarded again (no loops). HMAC rather than mutual TLS: one
// shared secret in the configuration every replica already shares (the
// store URL), no certificates to issue and rotate, and it works on the
// API's own listener, plain HTTP behind a load balancer or not; it gives
// authenticity and integrity, not confidentiality: keep the replicas'
// network private (README: Running several replicas).

// Cluster is what forwarding needs from the job service and its store's
// replica coordination.
type Cluster interface {
	// Self is this replica's id.
	Self() string
	// HoldsSession and HoldsJob: the session is open, the job tracked, in
	// this process (served here, no store read).
	HoldsSession(id string) bool
	HoldsJob(id string) bool
	// SessionOwner, JobOwner: the live lease holding it (job.ErrNotFound
	// or job.ErrSessionNotFound when none is live).
	SessionOwner(ctx context.Context, id string) (job.Lease, error)
	JobOwner(ctx context.Context, id string) (job.Lease, error)
	// Replicas lists the live leases.
	Replicas(ctx context.Context) ([]job.Lease, error)
}

// The forward envelope's headers.
const (
	hdrForward     = "X-Sandboxd-Forward" // the version: v1
	hdrForwardFrom = "X-Sandboxd-Forward-From"
	hdrForwardTo   = "X-Sandboxd-Forward-To"
	hdrForwardTime = "X-Sandboxd-Forward-Time" // unix nanoseconds
	hdrForwardNon  = "X-Sandboxd-Forward-Nonce"
	hdrForwardTen  = "X-Sandboxd-Forward-Tenant"
	hdrForwardOp   = "X-Sandboxd-Forward-Operator" // 1 or 0
	hdrForwardBody = "X-Sandboxd-Forward-Body"     // "none", or "trailer"
	hdrForwardSig  = "X-Sandboxd-Forward-Signature"
	// trlForwardBody is the trailer of a forward with a body: the MAC of
	// the signature and the body's SHA-256.
	trlForwardBody = "X-Sandboxd-Forward-Body-Mac"
)

// forwardWindow bounds how far a forward's timestamp may be from the
// receiver's clock (replicas' clocks are assumed within it); nonces are
// remembered for twice as long.
const forwardWindow = 30 * time.Second

// ownerCacheTTL is how long a session's or job's owner is remembered:
// a session never moves, and a forward that cannot connect forgets it.
const ownerCacheTTL = 5 * time.Second

var (
	errForgedForward = errors.New("forward refused")
	errForwardBody   = errors.New("the forwarded request's body does not match its signature")
)

// forwardAuth signs and verifies forward envelopes.
type forwardAuth struct {
	secret []byte
	self   func() string
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]int64 // nonce -> unix nanos after which it is forgotten
	// sweep is when seen is next pruned.
	sweep int64
}

func newForwardAuth(secret string, self func() string) *forwardAuth {
	return &forwardAuth{secret: []byte(secret), self: self, now: time.Now, seen: map[string]int64{}}
}

// canonical is the signed text: every field length-prefixed, so no
// field's content can shift another's.
func canonical(fields ...string) []byte {
	var b bytes.Buffer
	b.WriteString("sandboxd-forward-v1")
	for _, f := range fields {
		b.WriteByte('\n')
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.Bytes()
}

func (a *forwardAuth) mac(msg []byte) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// bodyMAC is the trailer's value for a body of digest sum under sig.
func (a *forwardAuth) bodyMAC(sig string, sum []byte) string {
	return a.mac(canonical("body", sig, hex.EncodeToString(sum)))
}

// sign sets the envelope on out, a request to replica to with the
// caller's principal p. mode is "none" (no body), "sha256:HEX" (a body
// read already: its digest is signed with the headers) or "trailer" (a
// streamed body: the MAC of its digest is its trailer, set when it ends;
// see signedBody).
func (a *forwardAuth) sign(out *http.Request, to string, p principal, mode string) string {
	var n [16]byte
	_, _ = rand.Read(n[:])
	ts := strconv.FormatInt(a.now().UnixNano(), 10)
	op := "0"
	if p.operator {
		op = "1"
	}
	h := out.Header
	h.Set(hdrForward, "v1")
	h.Set(hdrForwardFrom, a.self())
	h.Set(hdrForwardTo, to)
	h.Set(hdrForwardTime, ts)
	h.Set(hdrForwardNon, hex.EncodeToString(n[:]))
	h.Set(hdrForwardTen, p.tenant)
	h.Set(hdrForwardOp, op)
	h.Set(hdrForwardBody, mode)
	sig := a.mac(canonical(out.Method, out.URL.RequestURI(), a.self(), to, ts, h.Get(hdrForwardNon), p.tenant, op, mode))
	h.Set(hdrForwardSig, sig)
	return sig
}

// verify checks r's envelope and returns the principal it carries. A
// request with a body gets a body that fails at its end unless its
// trailer matches. Every refusal is errForgedForward (the reason is for
// the log only).
func (a *forwardAuth) verify(r *http.Request) (principal, error) {
	h := r.Header
	refuse := func(why string) (principal, error) {
		return principal{}, fmt.Errorf("%w: %s", errForgedForward, why)
	}
	if len(a.secret) == 0 {
		return refuse("this replica has no replica_secret")
	}
	if h.Get(hdrForward) != "v1" {
		return refuse("unknown envelope version")
	}
	from, to, ts, nonce := h.Get(hdrForwardFrom), h.Get(hdrForwardTo), h.Get(hdrForwardTime), h.Get(hdrForwardNon)
	tenant, op, mode, sig := h.Get(hdrForwardTen), h.Get(hdrForwardOp), h.Get(hdrForwardBody), h.Get(hdrForwardSig)
	want := a.mac(canonical(r.Method, r.RequestURI, from, to, ts, nonce, tenant, op, mode))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return refuse("bad signature")
	}
	if to != a.self() {
		return refuse("addressed to replica " + strconv.Quote(to))
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	now := a.now().UnixNano()
	if err != nil || t < now-int64(forwardWindow) || t > now+int64(forwardWindow) {
		return refuse("timestamp outside the window")
	}
	if len(nonce) != 32 {
		return refuse("bad nonce")
	}
	if op != "0" && op != "1" || (tenant == "" && op != "1") {
		return refuse("bad principal")
	}
	switch mode {
	case "none":
		if r.ContentLength != 0 { // chunked too (-1)
			return refuse("a body its signature does not cover")
		}
	case "trailer":
		r.Body = &verifiedBody{rc: r.Body, r: r, a: a, sig: sig, h: sha256.New()}
	default:
		sum, ok := strings.CutPrefix(mode, "sha256:")
		if !ok || len(sum) != 2*sha256.Size {
			return refuse("bad body mode")
		}
		r.Body = &verifiedBody{rc: r.Body, r: r, a: a, want: sum, h: sha256.New()}
	}
	if !a.fresh(nonce, now) {
		return refuse("replayed nonce")
	}
	return principal{tenant: tenant, operator: op == "1"}, nil
}

// fresh records nonce, reporting whether it was new.
func (a *forwardAuth) fresh(nonce string, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now > a.sweep {
		for n, exp := range a.seen {
			if exp < now {
				delete(a.seen, n)
			}
		}
		a.sweep = now + int64(forwardWindow)
	}
	if _, ok := a.seen[nonce]; ok {
		return false
	}
	a.seen[nonce] = now + 2*int64(forwardWindow)
	return true
}

// verifiedBody is a forwarded body checked against its trailer at EOF: a
// reader that reaches the end of an altered body gets errForwardBody.
type verifiedBody struct {
	rc  io.ReadCloser
	r   *http.Request
	a   *forwardAuth
	sig string
	// want is the signed digest (hex) of a body sent whole; "": the
	// trailer's MAC is checked.
	want string
	h    hash.Hash
	err  error
}

func (v *verifiedBody) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		ok := false
		if v.want != "" {
			ok = hmac.Equal([]byte(v.want), []byte(hex.EncodeToString(v.h.Sum(nil))))
		} else {
			ok = hmac.Equal([]byte(v.r.Trailer.Get(trlForwardBody)), []byte(v.a.bodyMAC(v.sig, v.h.Sum(nil))))
		}
		if !ok {
			v.err = errForwardBody
			return n, v.err
		}
	}
	return n, err
}

func (v *verifiedBody) Close() error { return v.rc.Close() }

// signedBody hashes a forwarded body as the transport sends it and sets
// its trailer at the end.
type signedBody struct {
	rc      io.ReadCloser
	trailer http.Header
	a       *forwardAuth
	sig     string
	h       hash.Hash
}

func (s *signedBody) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	s.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		s.trailer.Set(trlForwardBody, s.a.bodyMAC(s.sig, s.h.Sum(nil)))
	}
	return n, err
}

func (s *signedBody) Close() error { return s.rc.Close() }

// forwarder sends requests to their owner replica.
type forwarder struct {
	s     *server
	c     Cluster
	auth  *forwardAuth
	proxy *httputil.ReverseProxy

	mu     sync.Mutex
	owners map[string]cachedOwner // "s:"+session, "j:"+job
	reps   []job.Lease
	repsAt time.Time
}

type cachedOwner struct {
	l  job.Lease
	at time.Time
}

// forwardTarget rides on a request's context to the proxy's Rewrite.
type forwardTarget struct {
	lease job.Lease
	key   string // the owner cache's key, forgotten when the owner is unreachable
	p     principal
	// sum is the digest of a body read already (sent whole, with its
	// length); nil: the body streams.
	sum []byte
}

type forwardKey struct{}

// forwardedKey marks a request that arrived forwarded: it is served here,
// never forwarded again.
type forwardedKey struct{}

func isForwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

func newForwarder(s *server, c Cluster, secret string) *forwarder {
	f := &forwarder{s: s, c: c, auth: newForwardAuth(secret, c.Self), owners: map[string]cachedOwner{}}
	tr := &http.Transport{
		Proxy:               nil, // replica to replica: never through an environment's proxy
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	f.proxy = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1, // SSE, MCP streams and waits as they come
		Rewrite:       f.rewrite,
		ModifyResponse: func(resp *http.Response) error {
			f.s.m.forwards.WithLabelValues("sent").Inc()
			resp.Header.Del("X-Request-ID") // the same ID, already set by this replica
			return nil
		},
		ErrorHandler: f.unreachable,
	}
	return f
}

func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(forwardKey{}).(forwardTarget)
	pr.SetURL(&url.URL{Scheme: "http", Host: t.lease.Address})
	pr.SetXForwarded()
	h := pr.Out.Header
	h.Del("Authorization") // the owner serves the envelope's principal, not a key
	h.Del("X-API-Key")
	for k := range h {
		if strings.HasPrefix(k, hdrForward) {
			delete(h, k)
		}
	}
	h.Set("X-Request-ID", requestIDFrom(pr.In.Context()))
	body := pr.Out.Body != nil && pr.Out.Body != http.NoBody
	mode := "none"
	switch {
	case body && t.sum != nil:
		mode = "sha256:" + hex.EncodeToString(t.sum)
	case body:
		mode = "trailer"
	}
	sig := f.auth.sign(pr.Out, t.lease.Replica, t.p, mode)
	if mode == "trailer" {
		pr.Out.Trailer = http.Header{trlForwardBody: nil}
		pr.Out.ContentLength = -1 // chunked, so that the trailer follows
		pr.Out.Header.Del("Content-Length")
		pr.Out.Body = &signedBody{rc: pr.Out.Body, trailer: pr.Out.Trailer, a: f.auth, sig: sig, h: sha256.New()}
	}
}

// unreachable answers a forward whose owner did not answer: 503 with a
// Retry-After until its lease would expire (then the session or job is
// taken over, and answered here as lost).
func (f *forwarder) unreachable(w http.ResponseWriter, r *http.Request, err error) {
	t := r.Context().Value(forwardKey{}).(forwardTarget)
	f.forget(t.key)
	f.s.m.forwards.WithLabelValues("unreachable").Inc()
	if r.Context().Err() != nil {
		return // the client went away
	}
	retry := int(time.Until(t.lease.Expires).Seconds()) + 1
	f.s.writeError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeReplicaUnavailable,
		Message:    fmt.Sprintf("the replica holding this (%s) does not answer; if it stopped, its lease expires and the session or job is answered as lost", t.lease.Replica),
		RetryAfter: min(max(retry, 1), 60)})
	logger(r.Context(), f.s.log).Warn("forward to the owner replica failed", "replica", t.lease.Replica, "address", t.lease.Address, "err", err)
}

// forward sends r to owner l; body, when set, replaces r's (already read).
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, l job.Lease, key string, body []byte) {
	t := forwardTarget{lease: l, key: key, p: principalFrom(r.Context())}
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		sum := sha256.Sum256(body)
		t.sum = sum[:]
	}
	ctx := context.WithValue(r.Context(), forwardKey{}, t)
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
}

func (f *forwarder) forget(key string) {
	f.mu.Lock()
	delete(f.owners, key)
	f.mu.Unlock()
}

// owner is the live owner of key (cached), ok false when there is none
// or it is this replica.
func (f *forwarder) owner(ctx context.Context, key string, lookup func(context.Context) (job.Lease, error)) (job.Lease, bool) {
	now := time.Now()
	f.mu.Lock()
	c, hit := f.owners[key]
	f.mu.Unlock()
	if !hit || now.Sub(c.at) > ownerCacheTTL {
		l, err := lookup(ctx)
		if err != nil {
			return job.Lease{}, false // none live (or the store is away: served here, which says so)
		}
		c = cachedOwner{l: l, at: now}
		f.mu.Lock()
		if len(f.owners) >= 4096 {
			clear(f.owners)
		}
		f.owners[key] = c
		f.mu.Unlock()
	}
	if c.l.Replica == f.c.Self() || c.l.Address == "" {
		return job.Lease{}, false
	}
	return c.l, true
}

// toSession forwards r to session id's owner when another replica holds
// it; false: serve it here.
func (f *forwarder) toSession(w http.ResponseWriter, r *http.Request, id string, body []byte) bool {
	if f == nil || id == "" || isForwarded(r.Context()) || f.c.HoldsSession(id) {
		return false
	}
	key := "s:" + id
	l, ok := f.owner(r.Context(), key, func(ctx context.Context) (job.Lease, error) { return f.c.SessionOwner(ctx, id) })
	if !ok {
		return false
	}
	f.forward(w, r, l, key, body)
	return true
}

// toJob forwards r to job id's owner when another replica holds it.
func (f *forwarder) toJob(w http.ResponseWriter, r *http.Request, id string) bool {
	if f == nil || id == "" || isForwarded(r.Context()) || f.c.HoldsJob(id) {
		return false
	}
	key := "j:" + id
	l, ok := f.owner(r.Context(), key, func(ctx context.Context) (job.Lease, error) { return f.c.JobOwner(ctx, id) })
	if !ok {
		return false
	}
	f.forward(w, r, l, key, nil)
	return true
}

// sessionRoute is the middleware of /v1/sessions/{id}/...
func (f *forwarder) sessionRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.toSession(w, r, chi.URLParam(r, "id"), nil) {
			next.ServeHTTP(w, r)
		}
	})
}

// jobRoute is the middleware of the routes of a job that its owner
// answers best (cancel, events).
func (f *forwarder) jobRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.toJob(w, r, chi.URLParam(r, "id")) {
			next.ServeHTTP(w, r)
		}
	})
}

// approvalRoute forwards a decision to the replica holding the job that
// waits for it.
func (f *forwarder) approvalRoute(as ApprovalService) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f == nil || isForwarded(r.Context()) {
				next.ServeHTTP(w, r)
				return
			}
			a, err := as.GetApproval(r.Context(), approvalScope(r.Context()), chi.URLParam(r, "id"))
			if err != nil || a.State != job.ApprovalPending || !f.toJob(w, r, a.JobID) {
				next.ServeHTTP(w, r) // answered here: not found, decided already, or held here
			}
		})
	}
}

// MCP session IDs name the replica that holds them: base64url(replica
// id) "." random, so any replica routes a request of the session there.
const mcpIDSep = "."

// MCPSessionPrefix is the prefix of the MCP session IDs replica id makes
// (mcpserver.Options.SessionIDPrefix).
func MCPSessionPrefix(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id)) + mcpIDSep
}

// mcpOwner is the replica an MCP session ID names ("" when none).
func mcpOwner(sid string) string {
	enc, _, ok := strings.Cut(sid, mcpIDSep)
	if !ok || len(enc) > 512 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(b)
}

// replica is the live lease of replica id (the list cached for a second).
func (f *forwarder) replica(ctx context.Context, id string) (job.Lease, bool) {
	f.mu.Lock()
	reps, at := f.reps, f.repsAt
	f.mu.Unlock()
	if time.Since(at) > time.Second {
		var err error
		if reps, err = f.c.Replicas(ctx); err != nil {
			return job.Lease{}, false
		}
		f.mu.Lock()
		f.reps, f.repsAt = reps, time.Now()
		f.mu.Unlock()
	}
	for _, l := range reps {
		if l.Replica == id {
			return l, l.Address != ""
		}
	}
	return job.Lease{}, false
}

// mcpRoute forwards a request of an MCP session another live replica
// holds. A session of a replica that is gone is answered here: the SDK's
// 404 tells the client to start a new session.
func (f *forwarder) mcpRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := mcpOwner(r.Header.Get("Mcp-Session-Id"))
		if f == nil || owner == "" || owner == f.c.Self() || isForwarded(r.Context()) {
			next.ServeHTTP(w, r)
			return
		}
		l, ok := f.replica(r.Context(), owner)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		f.forward(w, r, l, "", nil)
	})
}

// peekSessionID reads a submit body's session_id without decoding the
// rest ("" when it has none, or the body is not JSON: decodeSubmit says
// why).
func peekSessionID(body []byte) string {
	if !bytes.Contains(body, []byte(`"session_id"`)) {
		return ""
	}
	var b struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return b.SessionID
}
