package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/tools"
)

// ToolSources reports and reloads the sources of tools beyond the
// built-ins (the tools directory, MCP providers).
type ToolSources interface {
	// Sources is the state of every source, for GET /v1/tools.
	Sources() []tools.SourceStatus
	// Reload reads the tools directory again (as SIGHUP does) and reports
	// what loaded and which files were refused.
	Reload(ctx context.Context) (tools.SourceStatus, error)
	// Warm starts the lazy providers before a listing, waiting until ctx
	// ends at most, so that their tools are listed.
	Warm(ctx context.Context)
}

// adminResource serves /v1/admin: operator actions, for the operator's
// keys (Options.OperatorKeys; without any key, the loopback-only server's
// single caller).
type adminResource struct{ *server }

func (rs *adminResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Use(rs.adminOnly)
	r.Post("/tools/reload", rs.reload)
	return r
}

func (rs *adminResource) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !principalFrom(r.Context()).operator {
			rs.writeError(w, r, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "admin routes need an operator key (operator_keys)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (rs *adminResource) reload(w http.ResponseWriter, r *http.Request) {
	st, err := rs.opts.Tools.Reload(r.Context())
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
