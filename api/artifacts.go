package api

import (
	"mime"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
)

// artifacts serves GET /v1/jobs/{id}/artifacts/{name}.
type artifacts struct {
	*server
	as ArtifactService
}

// inlineTypes are shown in place (the console shows figures); anything
// else a sandbox made is sent as an attachment, and nothing runs in the
// API's origin (sandbox CSP, nosniff).
var inlineTypes = map[string]bool{
	"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"text/plain": true, "application/json": true,
}

func (rs *artifacts) get(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	a, err := rs.as.Artifact(r.Context(), readScope(r.Context()), chi.URLParam(r, "id"), name)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	ct := "application/octet-stream"
	if mt, params, err := mime.ParseMediaType(a.MimeType); err == nil {
		ct = mime.FormatMediaType(mt, params)
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(a.Data)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Cache-Control", "private, max-age=3600")
	if mt, _, _ := mime.ParseMediaType(ct); !inlineTypes[mt] {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Data)
}
