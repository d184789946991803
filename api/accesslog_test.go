package api

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The access log: a successful request only at debug level, a refusal
// at info, so that log_level: info writes nothing per successful call.
func TestAccessLogLevels(t *testing.T) {
	for _, tc := range []struct {
		level        slog.Level
		ok, notFound bool
	}{
		{slog.LevelInfo, false, true},
		{slog.LevelDebug, true, true},
		{slog.LevelWarn, false, false},
	} {
		var buf bytes.Buffer
		h := newHarness(t, Options{
			Logger:     slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level})),
			Registerer: prometheus.NewRegistry(),
		})
		h.serve("GET", "/v1/tools", "")
		okLogged := strings.Contains(buf.String(), "status=200")
		h.serve("GET", "/v1/jobs/job_missing", "")
		nfLogged := strings.Contains(buf.String(), "status=404")
		if okLogged != tc.ok || nfLogged != tc.notFound {
			t.Errorf("level %s: 200 logged %v (want %v), 404 logged %v (want %v)\n%s", tc.level, okLogged, tc.ok, nfLogged, tc.notFound, buf.String())
		}
	}
}
