//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrometheusScrapesSandboxd starts a real Prometheus scraping a real
// sandboxd's metrics listener (metrics_addr) every second, runs jobs, and waits until PromQL sees them. Then
// it evaluates every query of the Grafana dashboard in deploy/ against that
// Prometheus: none may fail.
func TestPrometheusScrapesSandboxd(t *testing.T) {
	promBin := requirePrometheus(t)
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
  - name: bob
    api_keys: [key-bob]
`)
	prom := startPrometheus(t, promBin, strings.TrimPrefix(s.MetricsURL, "http://"))

	const calcs = 5
	for i := range calcs {
		s.run("key-alice", "calculator", map[string]any{"expression": fmt.Sprintf("%d+1", i)})
	}
	s.run("key-bob", "bash", map[string]any{"command": "echo hi"})

	fams := scrape(t, s)
	effects, ok := metricSum(fams, "sandboxd_effects_spent_total", map[string]string{"tenant": "bob"})
	if !ok || effects < 1 {
		t.Fatalf("/metrics: bob spent %v effects (present %v), want at least 1", effects, ok)
	}
	// Prometheus scrapes the metrics listener; the API has no /metrics.
	if resp, _ := s.do("GET", "/metrics", "", nil, nil); resp.StatusCode != 404 {
		t.Errorf("GET /metrics on the API: %d, want 404", resp.StatusCode)
	}
	prom.waitValue(t, `sum(sandboxd_jobs_total{tool="calculator",outcome="ok"})`, calcs)
	prom.waitValue(t, `sum by (tenant) (sandboxd_effects_spent_total{tenant="bob"})`, effects)
	prom.waitValue(t, `up{job="sandboxd"}`, 1)

	// Rates need two samples inside the window; give it a few scrapes.
	time.Sleep(3 * time.Second)
	exprs := dashboardExprs(t, "../deploy/grafana/dashboards/sandboxd.json")
	if len(exprs) < 10 {
		t.Fatalf("%d exprs in the dashboard", len(exprs))
	}
	for _, e := range exprs {
		q := grafanaVars.Replace(e.expr)
		n, err := prom.query(q)
		if err != nil {
			t.Errorf("panel %q: %s: %v", e.panel, q, err)
			continue
		}
		t.Logf("panel %q: %d series: %s", e.panel, n, q)
		if strings.Contains(e.expr, "sandboxd_jobs_total") && n == 0 {
			t.Errorf("panel %q: no series for %s after %d jobs", e.panel, q, calcs)
		}
	}
}

// grafanaVars replaces the Grafana variables the dashboard uses with
// values Prometheus accepts.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "15s",
	"$__range", "5m",
	"$tenant", ".*",
)

type dashboardExpr struct{ panel, expr string }

// dashboardExprs returns the exprs of every target of every panel (also
// inside rows) and of the query variables of a Grafana dashboard.
func dashboardExprs(t *testing.T, path string) []dashboardExpr {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []dashboardExpr
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) != "" {
					out = append(out, dashboardExpr{p.Title, tg.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// requirePrometheus returns Debian's prometheus binary ($SANDBOXD_PROMETHEUS,
// else /usr/bin/prometheus; scripts/setup.sh installs it). Without it the
// test skips, or fails when SANDBOXD_REQUIRE_TOOLS is set.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SANDBOXD_PROMETHEUS")
	if p == "" {
		p = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SANDBOXD_REQUIRE_TOOLS") != "" {
			t.Fatalf("prometheus not found at %s (scripts/setup.sh installs it): %v", p, err)
		}
		t.Skipf("prometheus not found at %s (scripts/setup.sh installs it; set SANDBOXD_REQUIRE_TOOLS=1 to fail instead)", p)
	}
	return p
}

// promServer is a Prometheus process the test started.
type promServer struct {
	URL string
	log *bytes.Buffer
}

// startPrometheus runs Prometheus on a free loopback port scraping target
// (HOST:PORT) every second, with its TSDB in a temporary directory. It is
// stopped at cleanup.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: sandboxd
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &promServer{URL: "http://" + addr, log: &bytes.Buffer{}}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited: %v\n%s", cmd.ProcessState, p.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s:\n%s", p.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query evaluates an instant PromQL query and returns the number of series
// (or 1 for a scalar) of the result, or the error Prometheus reported.
func (p *promServer) query(q string) (int, error) {
	vals, err := p.queryValues(q)
	return len(vals), err
}

// queryValues evaluates an instant query and returns its sample values.
func (p *promServer) queryValues(q string) ([]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.URL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %q: %v", resp.StatusCode, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("HTTP %d: %s: %s", resp.StatusCode, r.ErrorType, r.Error)
	}
	var raw [][]any
	switch r.Data.ResultType {
	case "vector":
		var v []struct {
			Value []any `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		for _, s := range v {
			raw = append(raw, s.Value)
		}
	case "scalar":
		var v []any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		raw = append(raw, v)
	default:
		return nil, fmt.Errorf("result type %q", r.Data.ResultType)
	}
	var out []float64
	for _, v := range raw {
		if len(v) != 2 {
			return nil, fmt.Errorf("sample %v", v)
		}
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("sample value %v: %v", v[1], err)
		}
		out = append(out, f)
	}
	return out, nil
}

// waitValue polls an instant query until it returns exactly one sample
// equal to want.
func (p *promServer) waitValue(t *testing.T, q string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []float64
	var err error
	for time.Now().Before(deadline) {
		last, err = p.queryValues(q)
		if err == nil && len(last) == 1 && last[0] == want {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("prometheus: %s = %v (err %v), want %v", q, last, err, want)
}
