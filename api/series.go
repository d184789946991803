package api

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/history"
)

// Windows the console offers; ?window= takes any duration from the
// shortest to the longest.
const (
	minSeriesWindow = 5 * time.Minute
	maxSeriesWindow = 24 * time.Hour
)

// seriesView is GET /v1/dashboard/series: the charts and the process
// (replica) whose history they are.
type seriesView struct {
	Replica string `json:"replica"`
	Scope   string `json:"scope"`
	history.Charts
}

// dashboardSeries serves the console's overview charts over ?window= (a
// Go duration from 5m to 24h, default 1h) from this process's in-memory
// history, scoped like /v1/dashboard: a tenant's key gets its tenant's
// series, an operator key every tenant's and the server-wide ones.
func (s *server) dashboardSeries(w http.ResponseWriter, r *http.Request) {
	window := time.Hour
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minSeriesWindow || d > maxSeriesWindow {
			s.writeError(w, r, badRequest(fmt.Sprintf("window %q must be a duration from 5m to 24h", v)))
			return
		}
		window = d
	}
	who := principalFrom(r.Context())
	sc, scope := history.Scope{All: true}, "operator"
	if !who.operator {
		sc, scope = history.Scope{Tenant: who.tenant}, "tenant "+who.tenant
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, seriesView{Replica: s.replica(), Scope: scope, Charts: s.opts.History.Query(window, sc)})
}

func (s *server) replica() string {
	if s.opts.Replica != "" {
		return s.opts.Replica
	}
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}
