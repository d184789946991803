package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/job"
)

// sessionsResource serves /v1/sessions.
type sessionsResource struct {
	*server
	ss SessionService
}

func (rs *sessionsResource) Routes() chi.Router {
	r := chi.NewRouter()
	// Listing and reading sessions take an operator key too (every
	// tenant's); the rest needs the session's tenant.
	r.With(rs.requireTenant).Post("/", rs.create)
	r.Get("/", rs.list)
	r.Route("/{id}", func(r chi.Router) {
		// Served by the replica holding the session (forward.go).
		r.Use(rs.fwd.sessionRoute)
		r.Get("/", rs.get)
		r.Group(func(r chi.Router) {
			r.Use(rs.requireTenant)
			r.Delete("/", rs.remove)
			r.Put("/files/*", rs.putFile)
			r.Get("/files/*", rs.getFile)
			r.Get("/files", rs.getFile)
			r.Post("/archive", rs.putArchive)
			r.Get("/archive", rs.getArchive)
		})
	})
	return r
}

const maxSessionSeconds = int64(100 * 365 * 24 * 3600)

func (rs *sessionsResource) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rs.opts.MaxBodyBytes))
	if err != nil {
		rs.writeBodyError(w, r, err)
		return
	}
	var b sessionBody
	if len(body) > 0 {
		if err := decodeStrict(body, &b); err != nil {
			rs.writeError(w, r, err)
			return
		}
	}
	if b.TTLSeconds < 0 || b.IdleTimeoutSeconds < 0 || b.TTLSeconds > maxSessionSeconds || b.IdleTimeoutSeconds > maxSessionSeconds {
		rs.writeError(w, r, badRequest("ttl_seconds and idle_timeout_seconds must be between 0 and 100 years"))
		return
	}
	if len(b.Image) > 1024 || !printable(b.Image) {
		rs.writeError(w, r, badRequest("image must be printable and at most 1024 bytes"))
		return
	}
	req := job.SessionRequest{
		Image: b.Image, Effects: toEffects(b.Effects),
		TTL:         time.Duration(b.TTLSeconds) * time.Second,
		IdleTimeout: time.Duration(b.IdleTimeoutSeconds) * time.Second,
		Tags:        b.Tags, Metadata: b.Metadata,
	}
	if b.Limits != nil {
		if req.Limits, err = limitsToRunner(*b.Limits); err != nil {
			rs.writeError(w, r, err)
			return
		}
	}
	s, err := rs.ss.CreateSession(r.Context(), tenantFrom(r.Context()), req)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+url.PathEscape(s.ID))
	writeJSON(w, http.StatusCreated, viewSession(s))
}

func (rs *sessionsResource) writeBodyError(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		rs.writeError(w, r, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
			Message: fmt.Sprintf("the request body exceeds %d bytes", tooLarge.Limit)})
		return
	}
	rs.writeError(w, r, badRequest("reading the request body: "+err.Error()))
}

func (rs *sessionsResource) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := job.SessionFilter{State: job.SessionState(q.Get("state")), Cursor: q.Get("cursor")}
	var err error
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		rs.writeError(w, r, err)
		return
	}
	if f.LabelFilter, err = parseLabelFilter(q); err != nil {
		rs.writeError(w, r, err)
		return
	}
	scope, err := listScope(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	list, next, err := rs.ss.ListSessions(r.Context(), scope, f)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	out := sessionList{Sessions: make([]*sessionView, 0, len(list)), NextCursor: next}
	for _, s := range list {
		out.Sessions = append(out.Sessions, viewSession(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (rs *sessionsResource) get(w http.ResponseWriter, r *http.Request) {
	s, err := rs.ss.GetSession(r.Context(), readScope(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSession(s))
}

func (rs *sessionsResource) remove(w http.ResponseWriter, r *http.Request) {
	s, err := rs.ss.CloseSession(r.Context(), tenantFrom(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSession(s))
}

// putFile: the raw body is the file's content (size-limited by the job
// service's configuration: 413 past it).
func (rs *sessionsResource) putFile(w http.ResponseWriter, r *http.Request) {
	info, err := rs.ss.PutFile(r.Context(), tenantFrom(r.Context()), chi.URLParam(r, "id"), chi.URLParam(r, "*"), r.Body)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewFileInfo(info))
}

// getFile: a file's raw bytes, or a directory's JSON listing.
func (rs *sessionsResource) getFile(w http.ResponseWriter, r *http.Request) {
	rc, info, list, err := rs.ss.OpenFile(r.Context(), tenantFrom(r.Context()), chi.URLParam(r, "id"), chi.URLParam(r, "*"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	if rc == nil {
		if list == nil {
			list = []job.FileInfo{}
		}
		writeJSON(w, http.StatusOK, viewFileList(info.Name, list))
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.LimitReader(rc, info.Size))
}

func (rs *sessionsResource) putArchive(w http.ResponseWriter, r *http.Request) {
	n, err := rs.ss.PutArchive(r.Context(), tenantFrom(r.Context()), chi.URLParam(r, "id"), r.URL.Query().Get("path"), r.Body)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ArchiveResult{Entries: n})
}

// getArchive streams a tar. Errors found before the first byte get a JSON
// error; the service checks the session and directory before writing.
func (rs *sessionsResource) getArchive(w http.ResponseWriter, r *http.Request) {
	tenant, id, dir := tenantFrom(r.Context()), chi.URLParam(r, "id"), r.URL.Query().Get("path")
	lw := &lazyWriter{w: w}
	if err := rs.ss.GetArchive(r.Context(), tenant, id, dir, lw); err != nil {
		if !lw.started {
			rs.writeError(w, r, err)
			return
		}
		logger(r.Context(), rs.log).Warn("archive stream failed", "session", id, "err", err)
		return
	}
	lw.start()
}

// lazyWriter sends the tar headers with the first byte, so an error before
// it can still be a JSON error.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/x-tar")
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}
