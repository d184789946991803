//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleConfig: alice has a policy (a deny rule, an exec budget) and a
// callback secret; bob's calculator calls wait for a human; the charts
// sample every 2 s so that a test sees several points.
const consoleConfig = `
tenants:
  - name: alice
    api_keys: [key-alice]
    callback_secret: cb-alice
    policy:
      rules:
        - tool: write_file
          action: deny
          reason: no writes here
      budgets:
        - effect: exec
          limit: 100
          per: 24h
  - name: bob
    api_keys: [key-bob]
    policy:
      rules:
        - tool: calculator
          action: confirm
          reason: bob's sums need a look
operator_keys: [key-op]
console:
  sample_interval: 2s
callbacks:
  allow_private_cidrs: [127.0.0.1/32]
  backoff: 100ms
`

// TestConsole drives the console in headless Chromium against a real
// sandboxd (local runner): every view loads without console errors and
// shows what the API answers for the same key: the overview's charts over
// two windows, the jobs list and its filters, a job found and opened (its
// arguments, output, timeline, guard decision, usage, PNG artifact,
// callback), a running job streaming its output, the open sessions with
// their sandbox and last jobs, the operator's view of every tenant and an
// approval decided with a reason. Screenshots are kept
// ($SANDBOXD_ARTIFACTS, console-*.png).
func TestConsole(t *testing.T) {
	chromium := requireChromium(t)
	rc := newHookReceiver(t)
	s := startServer(t, consoleConfig)

	// Alice's work: calculator calls (one fails), a shell command with
	// output, a refused write, a session with a matplotlib figure, a call
	// with a completion callback.
	for i := range 4 {
		s.run("key-alice", "calculator", map[string]any{"expression": fmt.Sprintf("%d*7", i)})
	}
	s.run("key-alice", "calculator", map[string]any{"expression": "1/0"})
	bash := s.run("key-alice", "bash", map[string]any{"command": "echo hello from the console test; echo oops >&2"})
	if bash.State != "succeeded" {
		t.Fatalf("bash: %+v", bash)
	}
	if j := s.run("key-alice", "write_file", map[string]any{"path": "x", "content": "y"}); j.Reason != "denied" {
		t.Fatalf("write_file under a deny rule: %+v", j)
	}
	var ses struct {
		ID      string `json:"id"`
		Sandbox string `json:"sandbox"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "key-alice", map[string]any{}, &ses); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	var fig jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "key-alice", map[string]any{"tool": "python_repl", "session_id": ses.ID,
		"arguments": map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('console')\nplt.show()\nprint('figure made')"}}, &fig)
	if resp.StatusCode != 200 || fig.Result == nil || len(fig.Result.Artifacts) != 1 {
		t.Fatalf("figure: %d %s", resp.StatusCode, data)
	}
	s.do("POST", "/v1/jobs?wait=true", "key-alice", map[string]any{"tool": "bash", "session_id": ses.ID,
		"arguments": map[string]any{"command": "ls /workspace"}}, nil)
	var hooked jobView
	s.do("POST", "/v1/jobs?wait=true", "key-alice", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "2+2"},
		"callback_url": rc.srv.URL + "/console"}, &hooked)
	waitCallback(t, s, "key-alice", hooked.ID)
	var labelled jobView
	s.do("POST", "/v1/jobs?wait=true", "key-alice", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "3+3"},
		"tags": []string{"run-42"}, "metadata": map[string]string{"trace_id": "t-9"}}, &labelled)

	ctx, console := newBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	useKey(t, ctx, "key-alice")

	t.Run("Overview", func(t *testing.T) { testConsoleCharts(t, ctx, s, "key-alice") })
	t.Run("Jobs", func(t *testing.T) { testConsoleJobs(t, ctx, s, bash.ID, labelled.ID) })
	t.Run("Job", func(t *testing.T) { testConsoleJob(t, ctx, s, bash.ID, fig.ID, hooked.ID) })
	t.Run("Live", func(t *testing.T) { testConsoleLive(t, ctx, s) })
	t.Run("Sessions", func(t *testing.T) { testConsoleSessions(t, ctx, s, ses.ID) })
	t.Run("Operator", func(t *testing.T) { testConsoleOperator(t, ctx, s) })
	console.check(t)
}

// useKey pastes key into the page's key field.
func useKey(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`sessionStorage.removeItem('sandboxd.apiKey'); document.getElementById('api-key').value = ''`),
		chromedp.SendKeys(chromedp.ID("api-key"), key),
		chromedp.Click(chromedp.ID("key-save")),
	); err != nil {
		t.Fatal(err)
	}
}

// goTo opens a view by its hash and waits for the condition.
func goTo(t *testing.T, ctx context.Context, hash, cond string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`location.hash = %q`, hash))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, cond, 20*time.Second)
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// apiJSON GETs path with key and decodes the answer.
func apiJSON(t *testing.T, s *server, key, path string, out any) {
	t.Helper()
	resp, data := s.do("GET", path, key, nil, out)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
}

type seriesAnswer struct {
	Replica       string  `json:"replica"`
	Scope         string  `json:"scope"`
	WindowSeconds float64 `json:"window_seconds"`
	StepSeconds   float64 `json:"step_seconds"`
	Times         []int64 `json:"times"`
	Charts        []struct {
		ID     string `json:"id"`
		Series []struct {
			Name   string     `json:"name"`
			Values []*float64 `json:"values"`
		} `json:"series"`
	} `json:"charts"`
}

// testConsoleCharts: the charts show the series GET /v1/dashboard/series
// answers for the key, and for each its value at the page's last point and
// its maximum over the page's points equal the API's at the same times; the
// 5 min window too.
func testConsoleCharts(t *testing.T, ctx context.Context, s *server, key string) {
	// Enough samples that the jobs above are between two of them.
	waitJS(t, ctx, `(function () {
		var c = document.querySelector('#chart-jobs tr[data-series="ok"] [data-what="max"]');
		return c !== null && Number(c.dataset.value) > 0;
	})()`, 40*time.Second)
	type row struct{ Chart, Series, Last, Max string }
	type page struct {
		Rows           []row
		First, Last    int64
		Replica, Width string
	}
	// once reads the page's charts right after it refreshed them, and the
	// API's at once; same is false when a sample fell between the two.
	once := func(window string) (same bool, got, want map[string]row) {
		n := evalJS[int](t, ctx, `Number(document.body.dataset.chartsLoaded || 0)`)
		waitJS(t, ctx, fmt.Sprintf(`Number(document.body.dataset.chartsLoaded || 0) > %d`, n), 20*time.Second)
		p := evalJS[page](t, ctx, `(function () {
			var box = document.getElementById('charts');
			var rows = [];
			box.querySelectorAll('.chart').forEach(function (c) {
				c.querySelectorAll('tr[data-series]').forEach(function (r) {
					rows.push({Chart: c.dataset.chart, Series: r.dataset.series,
						Last: r.querySelector('[data-what="last"]').dataset.value, Max: r.querySelector('[data-what="max"]').dataset.value});
				});
			});
			return {Rows: rows, First: Number(box.dataset.firstAt), Last: Number(box.dataset.sampledAt), Replica: box.dataset.replica, Width: box.dataset.window};
		})()`)
		var api seriesAnswer
		apiJSON(t, s, key, "/v1/dashboard/series?window="+window, &api)
		if api.StepSeconds != 2 {
			t.Fatalf("window %s: step %v s, want the sampling interval (2 s)", window, api.StepSeconds)
		}
		if p.Replica != api.Replica || fmt.Sprint(api.WindowSeconds) != p.Width {
			t.Errorf("page shows replica %q window %s, API %q %v", p.Replica, p.Width, api.Replica, api.WindowSeconds)
		}
		if len(api.Times) == 0 || api.Times[len(api.Times)-1] != p.Last {
			return false, nil, nil
		}
		idx := map[int64]int{}
		for i, tm := range api.Times {
			idx[tm] = i
		}
		first, ok := idx[p.First]
		if !ok {
			t.Fatalf("the page's first point %d is not among the API's %v", p.First, api.Times)
		}
		last := len(api.Times) - 1
		want = map[string]row{}
		for _, c := range api.Charts {
			for _, sr := range c.Series {
				r := row{Chart: c.ID, Series: sr.Name}
				if v := sr.Values[last]; v != nil {
					r.Last = formatFloat(*v)
				}
				var mx *float64
				for _, v := range sr.Values[first : last+1] {
					if v != nil && (mx == nil || *v > *mx) {
						mx = v
					}
				}
				if mx != nil {
					r.Max = formatFloat(*mx)
				}
				want[c.ID+"/"+sr.Name] = r
			}
		}
		got = map[string]row{}
		for _, r := range p.Rows {
			got[r.Chart+"/"+r.Series] = r
		}
		return true, got, want
	}
	compare := func(window string) {
		t.Helper()
		var got, want map[string]row
		for try := 0; ; try++ {
			same := false
			if same, got, want = once(window); same {
				break
			}
			if try == 10 {
				t.Fatalf("window %s: the page and the API never showed the same sample", window)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("window %s: the page shows\n%v\nthe API\n%v", window, got, want)
		}
		for _, must := range []string{"jobs/ok", "jobs/tool_error", "jobs/refused", "latency/bash p99", "effects/alice exec",
			"guard/deny", "guard/allow", "sandboxes/sessions active", "sandboxes/approvals pending"} {
			if _, ok := want[must]; !ok {
				t.Errorf("window %s: no series %s for alice (API has %v)", window, must, want)
			}
		}
		for _, wide := range []string{"sandboxes alive", "pool ready", "queue depth", "jobs in flight"} {
			if _, ok := want["sandboxes/"+wide]; ok {
				t.Errorf("alice sees the server-wide series %s", wide)
			}
		}
		if w := want["jobs/ok"]; w.Max == "" || w.Max == "0" {
			t.Errorf("window %s: jobs ok never above 0: %+v", window, w)
		}
	}
	compare("1h")
	screenshot(t, ctx, "console-overview.png")
	// The README's picture: the top of the overview, as a person sees it.
	if buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err != nil {
		t.Errorf("screenshot: %v", err)
	} else {
		saveArtifact(t, "console.png", buf)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#windows button[data-window="5m"]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById('charts').dataset.window === '300'`, 20*time.Second)
	compare("5m")
}

// testConsoleJobs: the list shows the tenant's jobs newest first as GET
// /v1/jobs does; the tool and state filters show what the API filters.
func testConsoleJobs(t *testing.T, ctx context.Context, s *server, bashID, labelledID string) {
	type row struct{ ID, State, Tool, Tenant string }
	rows := func() []row {
		return evalJS[[]row](t, ctx, `Array.from(document.querySelectorAll('#job-list tbody tr')).map(function (r) {
			return {ID: r.dataset.jobId, State: r.dataset.state, Tool: r.dataset.tool, Tenant: r.dataset.tenant};
		})`)
	}
	apiRows := func(key, query string) []row {
		var l struct {
			Jobs []jobView `json:"jobs"`
		}
		apiJSON(t, s, key, "/v1/jobs?limit=50"+query, &l)
		out := []row{}
		for _, j := range l.Jobs {
			out = append(out, row{j.ID, j.State, j.Tool, j.Tenant})
		}
		return out
	}
	loaded := func() int {
		return evalJS[int](t, ctx, `Number(document.getElementById('job-list').dataset.loaded || 0)`)
	}
	check := func(key, query string) {
		t.Helper()
		n := loaded()
		waitJS(t, ctx, fmt.Sprintf(`Number(document.getElementById('job-list').dataset.loaded || 0) > %d`, n), 20*time.Second)
		got, want := rows(), apiRows(key, query)
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("jobs%s: page\n%v\nAPI\n%v", query, got, want)
		}
	}
	goTo(t, ctx, "#/jobs", `document.body.dataset.view === 'jobs' && document.querySelectorAll('#job-list tbody tr').length > 0`)
	check("key-alice", "")
	// Filter through the form, as a person would.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-tool"), "calculator"),
		chromedp.SetValue(chromedp.ID("f-state"), "failed"),
		chromedp.Click(chromedp.ID("f-apply")),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `location.hash.indexOf('tool=calculator') >= 0 && location.hash.indexOf('state=failed') >= 0`, 10*time.Second)
	check("key-alice", "&tool=calculator&state=failed")
	if got := rows(); len(got) != 1 {
		t.Errorf("calculator failed: %v, want the 1/0 job", got)
	}
	screenshot(t, ctx, "console-jobs.png")
	// Labels: the job's tags and metadata show in its row, and the tag and
	// metadata fields filter as ?tag= and ?metadata.KEY= do.
	goTo(t, ctx, "#/jobs", `location.hash === '#/jobs' && document.getElementById('f-tool').value === ''`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-tag"), "run-42"),
		chromedp.SendKeys(chromedp.ID("f-metadata"), "trace_id=t-9"),
		chromedp.Click(chromedp.ID("f-apply")),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `location.hash.indexOf('tag=run-42') >= 0 && location.hash.indexOf('metadata.trace_id=t-9') >= 0`, 10*time.Second)
	check("key-alice", "&tag=run-42&metadata.trace_id=t-9")
	if got := rows(); len(got) != 1 || got[0].ID != labelledID {
		t.Errorf("jobs by labels: %v, want %s only", got, labelledID)
	}
	chips := evalJS[[]string](t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll('#job-list tr[data-job-id=%q] .labels .tag')).map(function (a) { return a.textContent; })`, labelledID))
	if !reflect.DeepEqual(chips, []string{"run-42", "trace_id=t-9"}) {
		t.Errorf("the row's labels: %q", chips)
	}
	goTo(t, ctx, "#/jobs?tool=bash", `location.hash === '#/jobs?tool=bash'`)
	check("key-alice", "&tool=bash")
	// Find the job and open it by clicking its row.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#job-list tr[data-job-id=%q] td:nth-child(4)`, bashID)))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, fmt.Sprintf(`(document.body.dataset.jobLoaded || '') === %q`, bashID+":succeeded"), 20*time.Second)
}

// testConsoleJob: a job's page shows its record as GET /v1/jobs/{id} and
// its timeline as GET /v1/jobs/{id}/timeline say.
func testConsoleJob(t *testing.T, ctx context.Context, s *server, bashID, figID, hookedID string) {
	open := func(id string) {
		t.Helper()
		goTo(t, ctx, "#/jobs/"+id, fmt.Sprintf(`(document.body.dataset.jobLoaded || '').indexOf(%q) === 0`, id+":"))
	}
	open(bashID)
	var j map[string]any
	apiJSON(t, s, "key-alice", "/v1/jobs/"+bashID, &j)
	res := j["result"].(map[string]any)
	proc := res["process"].(map[string]any)
	type view struct {
		Args, Stdout, Stderr, Content, Rule, Outcome, Wall string
		Types, Durations                                   []string
		Remaining                                          []string
	}
	v := evalJS[view](t, ctx, `(function () {
		var q = function (s) { var e = document.querySelector(s); return e ? e : {textContent: '', dataset: {}}; };
		var rows = Array.from(document.querySelectorAll('#timeline tbody tr'));
		return {
			Args: q('#job-arguments pre').textContent, Stdout: q('#job-output pre.stdout').textContent,
			Stderr: q('#job-output pre.stderr').textContent, Content: q('#job-result pre.content').textContent,
			Rule: q('#job-guard tr[data-key="rule"]').dataset.value || '', Outcome: q('#job-guard tr[data-key="outcome"]').dataset.value || '',
			Wall: q('#job-usage tr[data-key="wall"]').dataset.value || '',
			Types: rows.map(function (r) { return r.dataset.type; }), Durations: rows.map(function (r) { return r.dataset.durationMs; }),
			Remaining: Array.from(document.querySelectorAll('#guard-remaining tbody td[data-value]')).map(function (c) { return c.dataset.value; }),
		};
	})()`)
	var args any
	if err := json.Unmarshal([]byte(v.Args), &args); err != nil || !reflect.DeepEqual(args, j["arguments"]) {
		t.Errorf("arguments on the page %q (%v), API %v", v.Args, err, j["arguments"])
	}
	if v.Stdout != proc["stdout"] || v.Stderr != proc["stderr"] || v.Content != res["content"] {
		t.Errorf("output on the page %q / %q / content %q; API %q / %q / %q", v.Stdout, v.Stderr, v.Content, proc["stdout"], proc["stderr"], res["content"])
	}
	if !strings.Contains(v.Stdout, "hello from the console test") {
		t.Errorf("stdout %q", v.Stdout)
	}
	guard := j["guard"].(map[string]any)
	if v.Outcome != guard["outcome"] || v.Rule != guard["rule"] || v.Wall != formatFloat(res["usage"].(map[string]any)["wall_ms"].(float64)) {
		t.Errorf("guard outcome %q rule %q wall %q on the page; API %v %v, %v", v.Outcome, v.Rule, v.Wall, guard["outcome"], guard["rule"], res["usage"])
	}
	var remaining []string
	for _, r := range guard["remaining"].([]any) {
		remaining = append(remaining, formatFloat(r.(map[string]any)["remaining"].(float64)))
	}
	if fmt.Sprint(v.Remaining) != fmt.Sprint(remaining) || len(remaining) == 0 {
		t.Errorf("budget remaining on the page %v, API %v", v.Remaining, remaining)
	}
	var tl struct {
		Entries []struct {
			Type       string  `json:"type"`
			DurationMS float64 `json:"duration_ms"`
		} `json:"entries"`
	}
	apiJSON(t, s, "key-alice", "/v1/jobs/"+bashID+"/timeline", &tl)
	var types, durs []string
	for _, e := range tl.Entries {
		types = append(types, e.Type)
		durs = append(durs, formatFloat(e.DurationMS))
	}
	if fmt.Sprint(types) != fmt.Sprint(v.Types) || fmt.Sprint(durs) != fmt.Sprint(v.Durations) {
		t.Errorf("timeline on the page %v %v, API %v %v", v.Types, v.Durations, types, durs)
	}
	if len(types) < 3 || types[0] != "queued" || types[len(types)-1] != "finished" {
		t.Errorf("timeline %v", types)
	}
	screenshot(t, ctx, "console-job.png")

	// The figure: a PNG preview loaded through the API with the key.
	open(figID)
	waitJS(t, ctx, `/^\d+x\d+$/.test((document.querySelector('#job-artifacts img.preview') || {dataset: {}}).dataset.loaded || '')`, 20*time.Second)
	size := evalJS[string](t, ctx, `document.querySelector('#job-artifacts img.preview').dataset.loaded`)
	if size == "1x1" || size == "0x0" {
		t.Errorf("preview %s", size)
	}
	screenshot(t, ctx, "console-artifact.png")

	// The callback's attempts.
	open(hookedID)
	cb := evalJS[string](t, ctx, `(document.querySelector('#job-callback tr[data-key="state"]') || {dataset: {}}).dataset.value || ''`)
	n := evalJS[int](t, ctx, `document.querySelectorAll('#callback-attempts tbody tr').length`)
	if cb != "delivered" || n != 1 {
		t.Errorf("callback on the page: %q with %d attempts, want delivered with 1", cb, n)
	}
}

// testConsoleLive: a running job's page streams its output before it ends,
// then shows the final record.
func testConsoleLive(t *testing.T, ctx context.Context, s *server) {
	var j jobView
	resp, data := s.do("POST", "/v1/jobs", "key-alice", map[string]any{"tool": "bash",
		"arguments": map[string]any{"command": "echo tick 1; sleep 3; echo tick 2; sleep 3; echo tick 3"}}, &j)
	if resp.StatusCode != 202 {
		t.Fatalf("submit: %d %s", resp.StatusCode, data)
	}
	goTo(t, ctx, "#/jobs/"+j.ID, `/tick 1/.test((document.getElementById('job-live-stdout') || {}).textContent || '')`)
	var now jobView
	s.do("GET", "/v1/jobs/"+j.ID, "key-alice", nil, &now)
	live := evalJS[string](t, ctx, `document.getElementById('job-live-stdout').textContent`)
	if now.State != "running" || strings.Contains(live, "tick 3") {
		t.Errorf("the page streamed %q while the job is %s: want tick 1 before the end", live, now.State)
	}
	screenshot(t, ctx, "console-live.png")
	waitJS(t, ctx, fmt.Sprintf(`(document.body.dataset.jobLoaded || '') === %q`, j.ID+":succeeded"), 30*time.Second)
	if out := evalJS[string](t, ctx, `document.querySelector('#job-output pre.stdout').textContent`); out != "tick 1\ntick 2\ntick 3\n" {
		t.Errorf("final stdout %q", out)
	}
}

// testConsoleSessions: the open sessions with their sandbox and last jobs,
// as GET /v1/sessions and GET /v1/jobs?session= answer.
func testConsoleSessions(t *testing.T, ctx context.Context, s *server, sesID string) {
	goTo(t, ctx, "#/sessions", fmt.Sprintf(`document.querySelector('#session-list tr[data-session-id=%q]') !== null`, sesID))
	type row struct {
		ID, Sandbox string
		Jobs        []string
	}
	got := evalJS[[]row](t, ctx, `Array.from(document.querySelectorAll('#session-list tbody tr')).map(function (r) {
		return {ID: r.dataset.sessionId, Sandbox: r.cells[2].textContent,
			Jobs: Array.from(r.querySelectorAll('.last-jobs [data-job-id]')).map(function (d) { return d.dataset.jobId; })};
	})`)
	var l struct {
		Sessions []struct {
			ID      string `json:"id"`
			Sandbox string `json:"sandbox"`
		} `json:"sessions"`
	}
	apiJSON(t, s, "key-alice", "/v1/sessions?state=active", &l)
	var want []row
	for _, ss := range l.Sessions {
		var jl struct {
			Jobs []jobView `json:"jobs"`
		}
		apiJSON(t, s, "key-alice", "/v1/jobs?limit=3&session="+url.QueryEscape(ss.ID), &jl)
		r := row{ID: ss.ID, Sandbox: ss.Sandbox, Jobs: []string{}}
		for _, j := range jl.Jobs {
			r.Jobs = append(r.Jobs, j.ID)
		}
		want = append(want, r)
	}
	if !reflect.DeepEqual(got, want) || len(want) != 1 || want[0].Sandbox == "" || len(want[0].Jobs) != 2 {
		t.Errorf("sessions on the page %+v, API %+v", got, want)
	}
	screenshot(t, ctx, "console-sessions.png")
}

// testConsoleOperator: the operator's key lists every tenant's jobs and
// filters them by tenant; a tenant's pending approval is shown in full and
// approved with a reason.
func testConsoleOperator(t *testing.T, ctx context.Context, s *server) {
	var pending jobView
	resp, data := s.do("POST", "/v1/jobs", "key-bob", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "6*7"}}, &pending)
	if resp.StatusCode != 202 || pending.State != "pending_approval" {
		t.Fatalf("bob's calculator: %d %s", resp.StatusCode, data)
	}
	useKey(t, ctx, "key-op")
	goTo(t, ctx, "#/jobs", fmt.Sprintf(`document.querySelector('#job-list tr[data-job-id=%q]') !== null && !document.getElementById('f-tenant').parentNode.hidden`, pending.ID))
	tenants := evalJS[[]string](t, ctx, `Array.from(new Set(Array.from(document.querySelectorAll('#job-list tbody tr')).map(function (r) { return r.dataset.tenant; }))).sort()`)
	if fmt.Sprint(tenants) != "[alice bob]" {
		t.Errorf("the operator's list shows tenants %v, want alice and bob", tenants)
	}
	goTo(t, ctx, "#/jobs?tenant=bob", `Array.from(document.querySelectorAll('#job-list tbody tr')).every(function (r) { return r.dataset.tenant === 'bob'; }) && document.querySelectorAll('#job-list tbody tr').length === 1`)

	item := fmt.Sprintf(`li.approval[data-job-id=%q]`, pending.ID)
	goTo(t, ctx, "#/approvals", fmt.Sprintf(`document.querySelector(%q) !== null`, item))
	text := evalJS[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).textContent`, item))
	for _, w := range []string{"calculator", "tenant bob", "6*7", "bob's sums need a look"} {
		if !strings.Contains(text, w) {
			t.Errorf("the approval on the page lacks %q: %s", w, text)
		}
	}
	screenshot(t, ctx, "console-approvals.png")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(item+" input.reason"), "checked by the operator"),
		chromedp.Click(chromedp.CSS(item+" button.approve")),
	); err != nil {
		t.Fatal(err)
	}
	var done jobView
	s.do("GET", "/v1/jobs/"+pending.ID+"?wait=30s", "key-bob", nil, &done)
	if done.State != "succeeded" || done.Result == nil || strings.TrimSpace(done.Result.Content) != "42" {
		t.Errorf("approved job: %+v", done)
	}
	var approvals struct {
		Approvals []struct {
			JobID          string `json:"job_id"`
			State          string `json:"state"`
			DecisionReason string `json:"decision_reason"`
		} `json:"approvals"`
	}
	apiJSON(t, s, "key-bob", "/v1/approvals", &approvals)
	found := false
	for _, a := range approvals.Approvals {
		if a.JobID == pending.ID {
			found = a.State == "approved" && a.DecisionReason == "checked by the operator"
		}
	}
	if !found {
		t.Errorf("approval after the page's decision: %+v", approvals.Approvals)
	}
	// The operator's charts carry the server-wide gauges too.
	goTo(t, ctx, "#/overview", `document.querySelector('#chart-sandboxes tr[data-series="sandboxes alive"]') !== null`)
}
