package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authenticator maps API keys to tenants. Keys are compared in constant
// time: every configured key is compared (as SHA-256 digests, so lengths do
// not leak either) whatever matches.
type authenticator struct {
	keys []keyEntry
}

type keyEntry struct {
	digest [sha256.Size]byte
	tenant string
}

func newAuthenticator(keys map[string]string) *authenticator {
	a := &authenticator{}
	for k, t := range keys {
		a.keys = append(a.keys, keyEntry{digest: sha256.Sum256([]byte(k)), tenant: t})
	}
	return a
}

// tenant returns the tenant of key, or "" when it is unknown.
func (a *authenticator) tenant(key string) string {
	d := sha256.Sum256([]byte(key))
	found := ""
	for _, e := range a.keys {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			found = e.tenant
		}
	}
	return found
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
			tenant := DefaultTenant
			if len(a.keys) > 0 {
				key := presentedKey(r)
				if key == "" {
					s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing API key (Authorization: Bearer KEY or X-API-Key)"})
					return
				}
				if tenant = a.tenant(key); tenant == "" {
					s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "unknown API key"})
					return
				}
			}
			ctx := context.WithValue(r.Context(), tenantKey, tenant)
			ctx = withLogger(ctx, logger(r.Context(), s.log).With("tenant", tenant))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

func tenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey).(string)
	return t
}
