package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/job"
)

// principal is who a request authenticated as: a tenant (its jobs,
// sessions, approvals and dashboard numbers), or the operator (every
// tenant's dashboard numbers and approvals; no jobs or sessions: tenant is
// ""). Without any configured key the caller is both: the single tenant
// DefaultTenant on a loopback-only server, which is the operator's own.
type principal struct {
	tenant   string
	operator bool
}

// authenticator maps API keys to principals. Keys are compared in constant
// time: every configured key is compared (as SHA-256 digests, so lengths do
// not leak either) whatever matches.
type authenticator struct {
	keys []keyEntry
}

type keyEntry struct {
	digest [sha256.Size]byte
	who    principal
}

func newAuthenticator(tenantKeys map[string]string, operatorKeys []string) *authenticator {
	a := &authenticator{}
	for k, t := range tenantKeys {
		a.keys = append(a.keys, keyEntry{digest: sha256.Sum256([]byte(k)), who: principal{tenant: t}})
	}
	for _, k := range operatorKeys {
		a.keys = append(a.keys, keyEntry{digest: sha256.Sum256([]byte(k)), who: principal{operator: true}})
	}
	return a
}

// lookup returns the principal of key; ok is false when it is unknown.
func (a *authenticator) lookup(key string) (p principal, ok bool) {
	d := sha256.Sum256([]byte(key))
	for _, e := range a.keys {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			p, ok = e.who, true
		}
	}
	return p, ok
}

// presentedKey reads "Authorization: Bearer KEY" or "X-API-Key: KEY".
func presentedKey(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, key, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(key)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

func (a *authenticator) middleware(s *server) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			who := principal{tenant: DefaultTenant, operator: true}
			ctx := r.Context()
			if r.Header.Get(hdrForward) != "" {
				// A replica's forward (forward.go): the principal is the
				// envelope's, which only a replica can sign.
				var err error
				if s.fwdAuth == nil {
					err = fmt.Errorf("%w: forwarding is not configured here (replica_secret)", errForgedForward)
				} else {
					who, err = s.fwdAuth.verify(r)
				}
				if err != nil {
					s.m.forwards.WithLabelValues("refused").Inc()
					logger(ctx, s.log).Warn("refused a forwarded request", "err", err, "from", r.Header.Get(hdrForwardFrom), "remote", r.RemoteAddr)
					s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "forwarded request refused: bad or replayed replica signature"})
					return
				}
				s.m.forwards.WithLabelValues("received").Inc()
				ctx = context.WithValue(ctx, forwardedKey{}, true)
			} else if len(a.keys) > 0 {
				key := presentedKey(r)
				if key == "" {
					s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing API key (Authorization: Bearer KEY or X-API-Key)"})
					return
				}
				var ok bool
				if who, ok = a.lookup(key); !ok {
					s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "unknown API key"})
					return
				}
			}
			ctx = context.WithValue(ctx, principalKey, who)
			l := logger(r.Context(), s.log)
			if who.tenant != "" {
				l = l.With("tenant", who.tenant)
			} else {
				l = l.With("operator", true)
			}
			next.ServeHTTP(w, r.WithContext(withLogger(ctx, l)))
		})
	}
}

// requireTenant refuses the operator's keys on the routes of a tenant's
// own things (jobs, sessions): they belong to no tenant.
func (s *server) requireTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenantFrom(r.Context()) == "" {
			s.writeError(w, r, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "an operator key reads the dashboard and decides approvals; jobs and sessions need a tenant's key"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readScope is the tenant whose jobs and sessions the caller reads: its
// own, or every tenant's (job.AllTenants) for an operator key.
func readScope(ctx context.Context) string {
	if t := tenantFrom(ctx); t != "" {
		return t
	}
	return job.AllTenants
}

func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey).(principal)
	return p
}

// tenantFrom is the caller's tenant, "" for the operator.
func tenantFrom(ctx context.Context) string { return principalFrom(ctx).tenant }
