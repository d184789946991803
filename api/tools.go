package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/tools"
)

// toolsResource serves /v1/tools: the catalogue in sandboxd's own shape or
// exported for a model provider (?format=openai|anthropic|mcp).
type toolsResource struct{ *server }

func (rs *toolsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/", rs.list)
	r.Get("/{name}", rs.get)
	return r
}

type toolList struct {
	Tools []any `json:"tools"`
	// Sources are the tools directory and the MCP providers with their
	// state (sandboxd's own format only).
	Sources []tools.SourceStatus `json:"sources,omitempty"`
}

// warm starts lazy tool providers before a listing (at most a few
// seconds), so that their tools are listed.
func (rs *toolsResource) warm(r *http.Request) {
	if rs.opts.Tools == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), warmTimeout)
	defer cancel()
	rs.opts.Tools.Warm(ctx)
}

// warmTimeout bounds how long a listing waits for lazy providers.
const warmTimeout = 10 * time.Second

// ToolsPlacer is the optional part of the job service that says where a
// tenant's calls run (a session, or one-shot in the default image), so
// that descriptions say what is true there. *job.Service implements it.
type ToolsPlacer interface {
	// ToolsWhere: a session of another tenant is job.ErrSessionNotFound.
	ToolsWhere(ctx context.Context, tenant, sessionID string) (tools.Where, error)
}

// whereTimeout bounds how long a listing waits for the probe of an image
// (a sandbox's start and a short script); descriptions then promise only
// the standard library until the probe has answered.
const whereTimeout = 10 * time.Second

// where is where the caller's calls run: ?session_id= names a session of
// theirs, else one-shot.
func (rs *toolsResource) where(r *http.Request) (tools.Where, error) {
	p, ok := rs.svc.(ToolsPlacer)
	if !ok {
		return tools.Where{}, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), whereTimeout)
	defer cancel()
	return p.ToolsWhere(ctx, tenantFrom(r.Context()), r.URL.Query().Get("session_id"))
}

// parseFormat returns "" for sandboxd's own shape.
func parseFormat(s string) (tools.Format, error) {
	if s == "" || strings.EqualFold(s, "sandboxd") {
		return "", nil
	}
	f, err := tools.ParseFormat(s)
	if err != nil {
		return "", badRequest(fmt.Sprintf("format %q is not one of sandboxd, openai, anthropic, mcp", s))
	}
	return f, nil
}

// formatOf reads ?format; present but empty is a 400, as the document's
// enum says (leave it out for sandboxd's shape).
func formatOf(r *http.Request) (tools.Format, error) {
	q := r.URL.Query()
	if q.Has("format") && q.Get("format") == "" {
		return "", badRequest("format is empty; leave it out for sandboxd's shape, or give one of sandboxd, openai, anthropic, mcp")
	}
	return parseFormat(q.Get("format"))
}

func (rs *toolsResource) list(w http.ResponseWriter, r *http.Request) {
	format, err := formatOf(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	rs.warm(r)
	where, err := rs.where(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	out := toolList{Tools: []any{}}
	reg := rs.svc.Registry()
	if reg == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	if format != "" {
		exported, err := reg.ExportIn(format, where)
		if err != nil {
			rs.writeError(w, r, err)
			return
		}
		for _, t := range exported {
			out.Tools = append(out.Tools, t)
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	for _, name := range reg.Names() {
		if t, ok := reg.Lookup(name); ok {
			out.Tools = append(out.Tools, viewTool(t.In(where)))
		}
	}
	if rs.opts.Tools != nil {
		out.Sources = rs.opts.Tools.Sources()
	}
	writeJSON(w, http.StatusOK, out)
}

func (rs *toolsResource) get(w http.ResponseWriter, r *http.Request) {
	format, err := formatOf(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	name := chi.URLParam(r, "name")
	if _, ok := rs.svc.Registry().Lookup(name); !ok {
		rs.warm(r)
	}
	reg := rs.svc.Registry()
	var t *tools.Tool
	ok := false
	if reg != nil {
		t, ok = reg.Lookup(name)
	}
	if !ok {
		rs.writeError(w, r, fmt.Errorf("%w: %q", tools.ErrUnknownTool, name))
		return
	}
	where, err := rs.where(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	if format == "" {
		writeJSON(w, http.StatusOK, viewTool(t.In(where)))
		return
	}
	exported, err := reg.ExportIn(format, where, t.Name)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	if len(exported) != 1 {
		rs.writeError(w, r, fmt.Errorf("export of %q returned %d tools", t.Name, len(exported)))
		return
	}
	writeJSON(w, http.StatusOK, exported[0])
}
