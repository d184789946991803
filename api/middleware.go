package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/sandboxd/sandboxd/internal/ids"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	loggerKey
	principalKey
)

// maxRequestIDLen bounds an echoed X-Request-ID.
const maxRequestIDLen = 128

// requestID takes X-Request-ID from the request when it is sane (printable
// ASCII, at most 128 bytes), else generates one; echoes it on the response
// and carries it, and a logger holding it, on the context.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-ID", id)
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

func newRequestID() string { return ids.New("req_") }

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// logger returns the request's logger (carrying request_id and, once
// authenticated, tenant), or base.
func logger(ctx context.Context, base *slog.Logger) *slog.Logger {
	if l, ok := ctx.Value(loggerKey).(*slog.Logger); ok {
		return l
	}
	if id := requestIDFrom(ctx); id != "" {
		return base.With("request_id", id)
	}
	return base
}

func withLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey, l)
}

// statusRecorder remembers the status code. Unwrap lets
// http.ResponseController reach Flush and deadlines of the real writer.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush keeps the recorder a http.Flusher for code that asserts it.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// accessLog logs one line per request and records the request metrics by
// route pattern (not raw path, so job IDs do not explode label cardinality).
func (s *server) accessLog(m *httpMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			l := logger(r.Context(), s.log)
			r = r.WithContext(withLogger(r.Context(), l))
			rec := &statusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			elapsed := time.Since(start)
			m.observe(r.Method, route, rec.status, elapsed)
			// Every request at debug level (log_level: debug), refusals at
			// info, server errors at warn: a line per successful call cost
			// 4% of the daemon's CPU under load at info.
			level := slog.LevelDebug
			switch {
			case rec.status >= 500:
				level = slog.LevelWarn
			case rec.status >= 400:
				level = slog.LevelInfo
			}
			l = logger(r.Context(), s.log)
			if !l.Enabled(r.Context(), level) {
				return
			}
			l.Log(r.Context(), level, "http request",
				"method", r.Method, "route", route, "path", r.URL.Path,
				"status", rec.status, "bytes", rec.bytes, "duration", elapsed)
		})
	}
}

// recoverer turns a handler panic into a 500 and a logged stack.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
