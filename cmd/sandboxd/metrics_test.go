package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sandboxd/sandboxd/internal/netclass"
)

// TestDebugPprof: the profiler is on the metrics listener only with
// serve --debug-pprof.
func TestDebugPprof(t *testing.T) {
	defer func(old bool) { debugPprof = old }(debugPprof)
	for _, on := range []bool{false, true} {
		debugPprof = on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		stop, err := serveMetrics(context.Background(), addr, prometheus.NewRegistry(), netclass.NewProtected(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		stop()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 404, true: 200}[on]; resp.StatusCode != want {
			t.Errorf("debugPprof %v: status %d, want %d", on, resp.StatusCode, want)
		}
	}
}
