// Package api serves sandboxd's HTTP API: jobs (submit, get, list, cancel,
// server-sent events, timeline, artifacts), model turns (/v1/tool-calls),
// sessions (files, archives), approvals, the tool catalogue and its reload
// (/v1/admin), the console's scoped numbers and series, health and the
// OpenAPI document. It talks to the job service only through JobService;
// every error's HTTP status is decided in one switch (errors.go).
package api

import (
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/api/dashboard"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/internal/history"
)

// DefaultHeartbeat is the interval of SSE comment heartbeats.
const DefaultHeartbeat = 15 * time.Second

// DefaultTenant serves every request when no API keys are configured.
const DefaultTenant = config.DefaultTenant

// Options configures the handler. The zero value is usable: no auth (one
// tenant, DefaultTenant), 1 MiB bodies, waits capped at 5 minutes, no
// /metrics route, discarded logs.
type Options struct {
	// Keys maps an API key to its tenant. Empty means no authentication
	// and a single tenant, DefaultTenant.
	Keys map[string]string
	// API holds MaxBodyBytes (413 past it) and MaxWait (the ceiling of
	// ?wait on submit and get); zero fields take config.Defaults().API.
	config.API
	// OperatorKeys authenticate the operator: every tenant's dashboard
	// numbers and approvals, no jobs or sessions.
	OperatorKeys []string
	// Dashboard is gathered for GET /v1/dashboard, scoped to the caller;
	// nil: no such route. (/metrics is not the API's: the daemon serves it
	// on its own listener, metrics_addr.)
	Dashboard prometheus.Gatherer
	// History, when set, serves GET /v1/dashboard/series: the console's
	// overview charts from this process's in-memory history. Replica
	// names this process in that answer (default: host name and pid).
	History *history.History
	Replica string
	// Registerer receives the API's own metrics (requests by route and
	// code, request duration); nil means they are not exported.
	Registerer prometheus.Registerer
	// Logger receives access and error logs; nil discards them.
	Logger *slog.Logger
	// Version is reported by /healthz.
	Version string
	// Heartbeat is the interval of SSE comment heartbeats (default 15s).
	Heartbeat time.Duration
	// Turns serves POST /v1/tool-calls (one model turn's calls); nil: no
	// such routes.
	Turns TurnService
	// Tools, when set, adds the state of tool sources (MCP providers, the
	// tools directory) to GET /v1/tools and serves POST
	// /v1/admin/tools/reload (for the operator).
	Tools ToolSources
	// MCP serves the Model Context Protocol (Streamable HTTP) at /mcp for
	// a tenant's key: the handler of that tenant's MCP sessions
	// (mcpserver.Server.HandlerFor); nil: no such route.
	MCP func(tenant string) http.Handler
	// Cluster and ReplicaSecret, both set, forward a request for a
	// session, job or MCP session another replica holds to it, and accept
	// such forwards (forward.go); without them every request is served
	// here.
	Cluster       Cluster
	ReplicaSecret string
}

func (o *Options) setDefaults() {
	config.Fill(&o.API, config.Defaults().API)
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// server holds what every handler shares.
type server struct {
	svc  JobService
	opts Options
	log  *slog.Logger
	// fwd forwards to other replicas, fwdAuth checks their forwards (nil
	// on a single process).
	fwd     *forwarder
	fwdAuth *forwardAuth
	m       *httpMetrics
}

// New returns the HTTP handler of the API. Routes:
//
//	GET  /healthz, /openapi.yaml                   (no auth)
//	GET  /, /dashboard/*                           the dashboard's page (no auth; its data needs a key)
//	GET  /v1/dashboard                             the dashboard's numbers, scoped to the caller
//	GET  /v1/dashboard/series?window=              the console's charts (this process's history)
//	POST /v1/jobs                                  submit (?wait)
//	GET  /v1/jobs, /v1/jobs/{id} (?wait)           list (filters), get; operator: every tenant's
//	POST /v1/jobs/{id}/cancel
//	GET  /v1/jobs/{id}/events                      server-sent events
//	GET  /v1/jobs/{id}/timeline                    the persisted events with durations
//	GET  /v1/tools, /v1/tools/{name} (?format)
//	POST /v1/sessions, GET /v1/sessions, GET|DELETE /v1/sessions/{id}
//	PUT|GET /v1/sessions/{id}/files/{path...}
//	POST|GET /v1/sessions/{id}/archive?path=DIR   (tar, optionally gzip)
//	POST /v1/tool-calls, GET /v1/tool-calls/{id}   one model turn (?wait)
//	POST /v1/admin/tools/reload                    reload the tools directory
//	POST|GET|DELETE /mcp                           MCP (Streamable HTTP), a tenant's key
func New(svc JobService, opts Options) http.Handler {
	opts.setDefaults()
	m := newHTTPMetrics(opts.Registerer, opts.Logger)
	s := &server{svc: svc, opts: opts, log: opts.Logger, m: m}
	if opts.Cluster != nil && opts.ReplicaSecret != "" {
		s.fwd = newForwarder(s, opts.Cluster, opts.ReplicaSecret)
		s.fwdAuth = s.fwd.auth
	}

	r := chi.NewRouter()
	r.Use(requestID, s.accessLog(m), s.recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no route for " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + r.URL.Path})
	})

	r.Get("/healthz", s.healthz)
	r.Get("/openapi.yaml", serveOpenAPI)
	// The built-in dashboard's page: static, it shows nothing until the
	// key the user pastes reads /v1/dashboard and /v1/approvals.
	r.Method(http.MethodGet, "/", dashboard.Handler())
	r.Method(http.MethodGet, dashboard.Prefix+"*", dashboard.Handler())
	authn := newAuthenticator(opts.Keys, opts.OperatorKeys).middleware(s)
	if opts.MCP != nil {
		r.With(authn, s.requireTenant, s.fwd.mcpRoute).Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			opts.MCP(tenantFrom(r.Context())).ServeHTTP(w, r)
		}))
	}
	r.Route("/v1", func(r chi.Router) {
		r.Use(authn)
		// Reads of jobs and sessions take an operator key too (every
		// tenant's); what changes them needs a tenant's (requireTenant).
		r.Mount("/jobs", (&jobsResource{s}).Routes())
		r.Mount("/tools", (&toolsResource{s}).Routes())
		if opts.Dashboard != nil {
			r.Get("/dashboard", s.dashboardData)
		}
		if opts.History != nil {
			r.Get("/dashboard/series", s.dashboardSeries)
		}
		if ss, ok := svc.(SessionService); ok {
			r.Mount("/sessions", (&sessionsResource{server: s, ss: ss}).Routes())
		}
		if as, ok := svc.(ApprovalService); ok {
			r.Mount("/approvals", (&approvalsResource{server: s, as: as}).Routes())
		}
		if opts.Turns != nil {
			r.With(s.requireTenant).Mount("/tool-calls", (&turnsResource{server: s, ts: opts.Turns}).Routes())
		}
		if opts.Tools != nil {
			r.Mount("/admin", (&adminResource{server: s}).Routes())
		}
	})
	return r
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.opts.Version})
}
