//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestDashboard loads the built-in dashboard in headless Chromium against a
// real sandboxd: without a key it shows nothing; with a tenant's key it
// shows that tenant's numbers exactly as GET /v1/dashboard reports them
// for the key, and none of another tenant's; an operator key sees every
// tenant. The page must log no error; screenshots are saved.
func TestDashboard(t *testing.T) {
	chromium := requireChromium(t)
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
    policy:
      rules:
        - tool: write_file
          action: deny
      budgets:
        - effect: exec
          limit: 50
          per: 24h
  - name: bob
    api_keys: [key-bob]
operator_keys: [key-op]
`)
	for i := range 3 {
		s.run("key-alice", "calculator", map[string]any{"expression": fmt.Sprintf("%d*7", i)})
	}
	s.run("key-alice", "calculator", map[string]any{"expression": "1/0"})
	s.run("key-alice", "bash", map[string]any{"command": "echo hi"})
	if j := s.run("key-alice", "write_file", map[string]any{"path": "x", "content": "y"}); j.Reason != "denied" {
		t.Fatalf("write_file under a deny rule: %+v", j)
	}
	const bobCalcs = 2
	for i := range bobCalcs {
		s.run("key-bob", "calculator", map[string]any{"expression": fmt.Sprintf("%d+2", i)})
	}

	// The data behind the page needs a key.
	if resp, _ := s.do("GET", "/v1/dashboard", "", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("GET /v1/dashboard without a key: %d, want 401", resp.StatusCode)
	}

	ctx, console := newBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	// Without a key: the page loads and shows no number.
	waitJS(t, ctx, `/API key/.test(document.getElementById('status').textContent)`, 20*time.Second)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('td[data-metric]').length +
		Array.from(document.querySelectorAll('.tile [data-metric]')).filter(function (e) { return e.dataset.value !== ''; }).length`)); err != nil || n != 0 {
		t.Fatalf("without a key the page shows %d numbers (%v)", n, err)
	}
	screenshot(t, ctx, "dashboard-nokey.png")

	// The API key field stores the key for this tab only, and the page
	// reads the tenant's numbers with it.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("api-key"), "key-alice"),
		chromedp.Click(chromedp.ID("key-save")),
	); err != nil {
		t.Fatal(err)
	}
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem('sandboxd.apiKey') || ''`))
	if err != nil || stored != "key-alice" {
		t.Errorf("sessionStorage key %q, %v", stored, err)
	}
	// Two scrapes: the second gives rates, and both finished rendering.
	waitJS(t, ctx, `Number(document.body.dataset.scrapes || 0) >= 2 &&
		document.querySelector('#jobs [data-metric="sandboxd_jobs_total"][data-tool="calculator"][data-outcome="ok"]') !== null`, 20*time.Second)

	// Live: jobs run while the page is open show up in it.
	const later = 6
	for i := range later {
		s.run("key-alice", "calculator", map[string]any{"expression": fmt.Sprintf("%d+1", i)})
		time.Sleep(500 * time.Millisecond)
	}
	waitJS(t, ctx, fmt.Sprintf(`(document.querySelector('#jobs [data-metric="sandboxd_jobs_total"][data-tool="calculator"][data-outcome="ok"]') || {dataset: {}}).dataset.value === '%d'`, 3+later), 10*time.Second)

	// The page shows what /v1/dashboard says for alice's key now: nothing
	// runs in between.
	families := scrapeDashboard(t, s, "key-alice")
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() != "alice" {
					t.Errorf("alice's dashboard data has %s{tenant=%q}", name, l.GetValue())
				}
			}
		}
	}
	type cell struct {
		Metric, Text, Value string
		Labels              map[string]string
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]cell](`Array.from(document.querySelectorAll('td[data-metric]')).map(function (c) {
		var l = {};
		for (var k in c.dataset) if (k !== 'metric' && k !== 'value') l[k] = c.dataset[k];
		return {Metric: c.dataset.metric, Text: c.textContent, Value: c.dataset.value, Labels: l};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, c := range cells {
		name := c.Metric
		if name == "sandboxd_guard_budget_remaining" {
			continue // labelled by its row, not by data attributes
		}
		if c.Labels["tenant"] != "" && c.Labels["tenant"] != "alice" {
			t.Errorf("alice's page shows tenant %q: %s%v", c.Labels["tenant"], c.Metric, c.Labels)
		}
		want, ok := metricSum(families, name, c.Labels)
		if !ok {
			t.Errorf("page shows %s%v = %q, /v1/dashboard has no such series", c.Metric, c.Labels, c.Value)
			continue
		}
		if c.Value != formatFloat(want) {
			t.Errorf("page shows %s%v = %q (text %q), /v1/dashboard says %v", c.Metric, c.Labels, c.Value, c.Text, want)
		}
		checked[c.Metric+fmt.Sprint(c.Labels)] = true
	}
	for _, must := range []string{
		`sandboxd_jobs_totalmap[outcome:ok tool:calculator]`,
		`sandboxd_jobs_totalmap[outcome:ok tool:bash]`,
		`sandboxd_effects_spent_totalmap[effect:exec tenant:alice]`,
		`sandboxd_job_duration_seconds_countmap[tool:calculator]`,
		`sandboxd_guard_decisions_totalmap[outcome:deny rule:rules[0]]`,
		`sandboxd_guard_decisions_totalmap[outcome:allow rule:default]`,
	} {
		if !checked[must] {
			t.Errorf("the page shows no %s; it shows %v", must, checked)
		}
	}
	if v, _ := metricSum(families, "sandboxd_jobs_total", map[string]string{"tool": "calculator", "outcome": "ok"}); v != 3+later {
		t.Errorf("/v1/dashboard for alice: %v calculator jobs ok, want %d (alice's only)", v, 3+later)
	}
	// Prometheus's /metrics and the operator's dashboard data count bob's too.
	all := scrape(t, s)
	op := scrapeDashboard(t, s, "key-op")
	for what, fams := range map[string]map[string]*dto.MetricFamily{"/metrics": all, "the operator's /v1/dashboard": op} {
		if v, _ := metricSum(fams, "sandboxd_jobs_total", map[string]string{"tool": "calculator", "outcome": "ok"}); v != 3+later+bobCalcs {
			t.Errorf("%s: %v calculator jobs ok, want %d (alice's and bob's)", what, v, 3+later+bobCalcs)
		}
	}
	if _, ok := metricSum(op, "sandboxd_queue_depth", nil); !ok {
		t.Error("the operator's dashboard data lacks the server-wide sandboxd_queue_depth")
	}
	if _, ok := metricSum(families, "sandboxd_queue_depth", nil); ok {
		t.Error("a tenant's dashboard data has the server-wide sandboxd_queue_depth")
	}

	// Tiles: the value of a present metric, "—" for an absent one.
	tiles, err := chromedp.Run(ctx, chromedp.Evaluate[[]cell](`Array.from(document.querySelectorAll('.tile [data-metric]')).map(function (c) {
		return {Metric: c.dataset.metric, Text: c.textContent, Value: c.dataset.value || ''};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tiles) < 5 {
		t.Fatalf("%d metric tiles", len(tiles))
	}
	for _, c := range tiles {
		want, ok := metricSum(families, c.Metric, nil)
		switch {
		case !ok && (c.Text != "—" || c.Value != ""):
			t.Errorf("tile %s: %q (value %q), want — (absent from /v1/dashboard)", c.Metric, c.Text, c.Value)
		case ok && c.Value != formatFloat(want):
			t.Errorf("tile %s: %q (value %q), /v1/dashboard says %v", c.Metric, c.Text, c.Value, want)
		}
	}

	// Budget remaining: the exec budget after the one bash call.
	budget, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function () {
		var c = document.querySelector('#budgets [data-metric="sandboxd_guard_budget_remaining"]');
		return c ? c.dataset.value : 'none';
	})()`))
	if want, ok := metricSum(families, "sandboxd_guard_budget_remaining", map[string]string{"effect": "exec"}); err != nil || !ok || want != 49 || budget != formatFloat(want) {
		t.Errorf("budget remaining on the page %q (%v), /v1/dashboard %v (present %v), want 49", budget, err, want, ok)
	}

	// Latency: a p50 for calculator within the histogram's range.
	p50, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function () {
		var rows = document.querySelectorAll('#latency tbody tr');
		for (var i = 0; i < rows.length; i++) {
			if (rows[i].cells[0].textContent === 'calculator') return rows[i].cells[2].dataset.value;
		}
		return 'none';
	})()`))
	if err != nil || p50 == "none" || p50 == "" {
		t.Errorf("no calculator p50 in the latency table: %q %v", p50, err)
	}
	// The approvals poll sends the key too: no 401 message.
	waitJS(t, ctx, `!/HTTP 401/.test(document.getElementById('approvals-msg').textContent)`, 10*time.Second)

	screenshot(t, ctx, "dashboard.png")
	console.check(t)

	t.Run("Parser", func(t *testing.T) { testDashboardParser(t, ctx) })
	t.Run("Approvals", func(t *testing.T) { testDashboardApprovals(t, ctx) })
}

// testDashboardApprovals holds jobs of two tenants for approval (their
// rules say confirm for calculator). With alice's key the page shows only
// alice's, approves one and denies the other; with the operator's key it
// shows bob's and approves it. The jobs' fates are checked through the API.
func testDashboardApprovals(t *testing.T, parent context.Context) {
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
    policy:
      rules:
        - tool: calculator
          action: confirm
  - name: bob
    api_keys: [key-bob]
    policy:
      rules:
        - tool: calculator
          action: confirm
operator_keys: [key-op]
`)
	submit := func(key, expr string) jobView {
		var j jobView
		resp, data := s.do("POST", "/v1/jobs", key, map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": expr}}, &j)
		if resp.StatusCode != 202 && resp.StatusCode != 200 {
			t.Fatalf("submit: status %d: %s", resp.StatusCode, data)
		}
		if j.State != "pending_approval" {
			t.Fatalf("submit: state %q, want pending_approval: %s", j.State, data)
		}
		return j
	}
	yes, no := submit("key-alice", "6*7"), submit("key-alice", "6*9")
	bobs := submit("key-bob", "7*6")

	ctx, console := newTab(t, parent)
	useKey := func(key string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Evaluate[chromedp.Void](`sessionStorage.removeItem('sandboxd.apiKey'); document.getElementById('api-key').value = ''`),
			chromedp.SendKeys(chromedp.ID("api-key"), key),
			chromedp.Click(chromedp.ID("key-save")),
		); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/")); err != nil {
		t.Fatal(err)
	}
	useKey("key-alice")
	item := func(j jobView) string { return fmt.Sprintf(`li.approval[data-job-id=%q]`, j.ID) }
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) !== null && document.querySelector(%q) !== null`, item(yes), item(no)), 20*time.Second)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, item(bobs)))); err != nil || n != 0 {
		t.Fatalf("alice's page lists bob's approval (%d, %v)", n, err)
	}
	// The pending tile counts alice's only.
	waitJS(t, ctx, `document.getElementById('t-approvals').dataset.value === '2'`, 10*time.Second)
	if want, ok := metricSum(scrape(t, s), "sandboxd_approvals_pending", nil); !ok || want != 3 {
		t.Errorf("/metrics: sandboxd_approvals_pending %v (present %v), want 3 (both tenants)", want, ok)
	}
	screenshot(t, ctx, "dashboard-approvals.png")

	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(item(no)+" input.reason"), "not this one"),
		chromedp.Click(chromedp.CSS(item(no)+" button.deny")),
		chromedp.Click(chromedp.CSS(item(yes)+" button.approve")),
	); err != nil {
		t.Fatal(err)
	}
	wait := func(key string, j jobView) jobView {
		var got jobView
		resp, data := s.do("GET", "/v1/jobs/"+j.ID+"?wait=30s", key, nil, &got)
		if resp.StatusCode != 200 {
			t.Fatalf("get %s: %d %s", j.ID, resp.StatusCode, data)
		}
		return got
	}
	if got := wait("key-alice", yes); got.State != "succeeded" || got.Result == nil || strings.TrimSpace(got.Result.Content) != "42" {
		t.Errorf("approved job: %+v", got)
	}
	if got := wait("key-alice", no); got.State != "failed" || got.Reason != "approval_denied" {
		t.Errorf("denied job: state %q reason %q, want failed approval_denied", got.State, got.Reason)
	}
	// The page saw the decisions through and shows nothing pending.
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) === null && document.querySelector(%q) === null`, item(yes), item(no)), 15*time.Second)

	// The operator sees bob's approval and may decide it.
	useKey("key-op")
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) !== null`, item(bobs)), 20*time.Second)
	screenshot(t, ctx, "dashboard-operator.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(item(bobs)+" button.approve"))); err != nil {
		t.Fatal(err)
	}
	if got := wait("key-bob", bobs); got.State != "succeeded" || got.Result == nil || strings.TrimSpace(got.Result.Content) != "42" {
		t.Errorf("bob's job approved by the operator: %+v", got)
	}
	console.check(t)
}

// ---- browser ------------------------------------------------------------

// requireChromium returns the path of Chromium: $SANDBOXD_CHROMIUM, else
// Debian's /usr/bin/chromium (scripts/setup.sh installs it). Without it the
// test skips, or fails when SANDBOXD_REQUIRE_TOOLS is set.
func requireChromium(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SANDBOXD_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SANDBOXD_REQUIRE_TOOLS") != "" {
			t.Fatalf("chromium not found at %s (scripts/setup.sh installs it): %v", p, err)
		}
		t.Skipf("chromium not found at %s (scripts/setup.sh installs it; set SANDBOXD_REQUIRE_TOOLS=1 to fail instead)", p)
	}
	return p
}

// newBrowser starts headless Chromium for the test (closed at cleanup) and
// returns a tab's context and its console recorder.
func newBrowser(t *testing.T, execPath string) (context.Context, *consoleLog) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("headless", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		// Only the servers the test starts: every host name fails to
		// resolve, and the page uses 127.0.0.1.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		chromedp.Cancel(cctx)
		cancel()
		cancelAlloc() // waits for the browser process to exit
	})
	if err := chromedp.Do(ctx); err != nil { // start the browser with no deadline
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, recordConsole(t, ctx)
}

// newTab opens another tab of parent's browser, closed at cleanup.
func newTab(t *testing.T, parent context.Context) (context.Context, *consoleLog) {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return ctx, recordConsole(t, ctx)
}

// consoleLog records what a tab wrote to its console.
type consoleLog struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func recordConsole(t *testing.T, ctx context.Context) *consoleLog {
	c := &consoleLog{}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

// check fails the test on an uncaught exception, a console.error or
// console.assert, and a browser log error, except failed requests to the
// API under /v1 (the page shows those, a 401 before the key is entered
// for instance).
func (c *consoleLog) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		where := fmt.Sprintf("%s:%d", m.URL, m.Line+1)
		switch {
		case m.IsException():
			t.Errorf("uncaught exception at %s: %s", where, m.Text)
		case m.Type == chromedp.ConsoleError && m.Source == "network" && strings.Contains(m.URL, "/v1/"):
			t.Logf("page API request failed (shown in the page): %s %s", m.URL, m.Text)
		case m.Type == chromedp.ConsoleError || m.Type == "assert":
			t.Errorf("console %s at %s (source %q): %s", m.Type, where, m.Source, m.Text)
		default:
			t.Logf("console %s: %s", m.Type, m.Text)
		}
	}
}

// waitJS polls a JavaScript condition until it is true.
func waitJS(t *testing.T, ctx context.Context, cond string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent + ' | ' + document.getElementById('approvals-msg').textContent`))
			screenshot(t, ctx, "dashboard-timeout.png")
			t.Fatalf("page never satisfied %s (err %v); status: %s", cond, err, status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// screenshot saves a PNG of the whole page into the artifacts directory
// ($SANDBOXD_ARTIFACTS, default /tmp/sandboxd-artifacts) and logs its path.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SANDBOXD_ARTIFACTS")
	if dir == "" {
		dir = "/tmp/sandboxd-artifacts"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", p)
}

// ---- /metrics -----------------------------------------------------------

// scrape reads and parses /metrics of sandboxd's metrics listener.
func scrape(t *testing.T, s *server) map[string]*dto.MetricFamily {
	t.Helper()
	return parseMetrics(t, "/metrics", s.getMetrics())
}

// scrapeDashboard reads and parses GET /v1/dashboard with key.
func scrapeDashboard(t *testing.T, s *server, key string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := s.do("GET", "/v1/dashboard", key, nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/dashboard: %d %s", resp.StatusCode, body)
	}
	return parseMetrics(t, "/v1/dashboard", body)
}

func parseMetrics(t *testing.T, what string, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse %s: %v", what, err)
	}
	return fams
}

// metricSum sums the samples of a counter, gauge or untyped metric, or the
// _count of a histogram named name+"_count", whose labels include want. ok
// is false when no sample matches.
func metricSum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (sum float64, ok bool) {
	family, count := name, false
	if f, found := fams[name]; !found || f == nil {
		if base, cut := strings.CutSuffix(name, "_count"); cut {
			family, count = base, true
		}
	}
	f := fams[family]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		ok = true
		switch {
		case count && m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		default:
			ok = false
		}
	}
	return sum, ok
}

// formatFloat formats v as JavaScript's String(number) does for the values
// metrics take (integers and short decimals).
func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e21 {
		return fmt.Sprintf("%.0f", v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// testDashboardParser runs the page's own Prometheus text parser on
// awkward input: escapes, special values, timestamps, comments, CRLF and
// lines it must skip rather than throw on.
func testDashboardParser(t *testing.T, ctx context.Context) {
	type result struct {
		Samples, Errors int
		Sum             float64
		Label           string
		Special         []string
		P50, P99        float64
		Empty           bool
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[result](`(function () {
		var P = window.SandboxdProm;
		var text = [
			'# HELP x_total Help with \\\\ and \\n.',
			'# TYPE x_total counter',
			'x_total{a="1",b="q\\"uote\\\\d\\nnl"} 2 1700000000000',
			'x_total{a="1" , b="c,}d"} 3e0\r',
			'x_total{a="2",} 5',
			'x_total 1',
			'special{k="inf"} +Inf',
			'special{k="ninf"} -Inf',
			'special{k="nan"} NaN',
			'h_bucket{le="0.1"} 1',
			'h_bucket{le="1"} 3',
			'h_bucket{le="+Inf"} 4',
			'broken{a="unterminated} 1',
			'broken{=""} 1',
			'broken 1 2 3',
			'broken not-a-number',
			'   ',
			'# a comment',
		].join('\n');
		var p = P.parse(text);
		var lbl = p.samples[0] ? p.samples[0].labels.b : '';
		var h = P.buckets(p, 'h', []).get('');
		return {
			Samples: p.samples.length, Errors: p.errors.length,
			Sum: P.sum(p, 'x_total', {a: '1'}), Label: lbl,
			Special: p.samples.filter(function (s) { return s.name === 'special'; }).map(function (s) { return String(s.value); }),
			P50: P.quantile(0.5, h.buckets), P99: P.quantile(0.99, h.buckets),
			Empty: P.sum(P.parse(''), 'x_total') === null && P.parse(null).errors.length === 1,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	want := result{
		Samples: 10, Errors: 4, Sum: 5, Label: "q\"uote\\d\nnl",
		Special: []string{"Infinity", "-Infinity", "NaN"},
		P50:     0.55, P99: 1, Empty: true,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parser:\n got %+v\nwant %+v", got, want)
	}
}
