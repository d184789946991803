package deploy

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard the tests read. Panels may
// nest in rows.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string      `json:"name"`
			Datasource *datasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) (dashboard, []panel) {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, "grafana/dashboards/sandboxd.json")), &d); err != nil {
		t.Fatalf("sandboxd.json: %v", err)
	}
	var flat []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			flat = append(flat, p)
		}
	}
	walk(d.Panels)
	return d, flat
}

func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	d, panels := loadDashboard(t)
	var ds struct {
		Datasources []struct{ UID, Type string } `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	uid := ds.Datasources[0].UID
	if d.UID == "" || d.Title == "" || len(panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels", d.UID, d.Title, len(panels))
	}
	exported := exportedMetrics(t)
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource == nil || p.Datasource.UID != uid || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want the provisioned %q", p.Title, p.Datasource, uid)
		}
		n := 0
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				continue
			}
			n++
			if tg.Datasource != nil && tg.Datasource.UID != uid {
				t.Errorf("panel %q target %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
			}
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q target %s: no sandboxd metric in %q", p.Title, tg.RefID, tg.Expr)
			}
			for _, m := range names {
				if !exported[m] {
					t.Errorf("panel %q: %s is not a metric sandboxd exports (%q)", p.Title, m, tg.Expr)
				}
			}
		}
		if n == 0 {
			t.Errorf("panel %q has no target with an expr", p.Title)
		}
	}
	for _, v := range d.Templating.List {
		if v.Datasource != nil && v.Datasource.UID != uid {
			t.Errorf("variable %s: datasource %+v", v.Name, v.Datasource)
		}
	}
	// The panels the deployment promises (README.md).
	all := ""
	for _, p := range panels {
		for _, tg := range p.Targets {
			all += tg.Expr + "\n"
		}
	}
	for _, must := range []string{
		"rate(sandboxd_jobs_total", "histogram_quantile(0.5,", "histogram_quantile(0.9,", "histogram_quantile(0.99,",
		"sandboxd_effects_spent_total", "sandboxd_guard_budget_remaining", "sandboxd_guard_decisions_total",
		"sandboxd_approvals_pending", "sandboxd_sandboxes_alive", "sandboxd_pool_ready", "sandboxd_egress_requests_total",
	} {
		if !strings.Contains(all, must) {
			t.Errorf("no panel queries %s", must)
		}
	}
}

// metricNameRE finds sandboxd metric names in PromQL.
var metricNameRE = regexp.MustCompile(`\bsandboxd_[a-zA-Z0-9_:]+`)

// metricNames returns the sandboxd metric names an expression uses, with a
// histogram's _bucket, _sum and _count suffix removed.
func metricNames(expr string) []string {
	var out []string
	for _, m := range metricNameRE.FindAllString(expr, -1) {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(m, suf) && histograms[strings.TrimSuffix(m, suf)] {
				m = strings.TrimSuffix(m, suf)
			}
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

var histograms = map[string]bool{
	"sandboxd_job_duration_seconds":          true,
	"sandboxd_http_request_duration_seconds": true,
}

// knownMetrics are the metrics the dashboards may use.
var knownMetrics = []string{
	"sandboxd_jobs_total", "sandboxd_job_duration_seconds", "sandboxd_effects_spent_total",
	"sandboxd_queue_depth", "sandboxd_queue_rejected_total", "sandboxd_sandboxes_alive",
	"sandboxd_jobs_in_flight", "sandboxd_sessions_active", "sandboxd_sessions_closed_total",
	"sandboxd_pool_ready", "sandboxd_pool_hits_total", "sandboxd_pool_misses_total",
	"sandboxd_http_requests_total", "sandboxd_http_request_duration_seconds",
	"sandboxd_approvals_pending",
	"sandboxd_guard_decisions_total", "sandboxd_guard_budget_remaining", "sandboxd_guard_budget_limit",
	"sandboxd_egress_requests_total", "sandboxd_egress_bytes_total",
}

// exportedMetrics returns knownMetrics after checking each against the Go
// source of sandboxd (a "sandboxd_..." literal, or Namespace "sandboxd" +
// Subsystem + Name). A known metric the source lacks fails the test: the
// list must follow renames.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	inSource := sourceMetricNames(t)
	out := map[string]bool{}
	var missing []string
	for _, m := range knownMetrics {
		out[m] = true
		if !inSource[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		t.Errorf("metrics the dashboards use but no Go source of sandboxd defines: %v", missing)
	}
	return out
}

var (
	literalRE = regexp.MustCompile(`"(sandboxd_[a-z0-9_]+)"`)
	nsRE      = regexp.MustCompile(`Namespace:\s*"sandboxd",\s*Subsystem:\s*"([a-z0-9_]+)",\s*Name:\s*"([a-z0-9_]+)"`)
)

func sourceMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "deploy", "dashboard", "integration", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src := readFile(t, p)
		for _, m := range literalRE.FindAllStringSubmatch(src, -1) {
			names[m[1]] = true
		}
		for _, m := range nsRE.FindAllStringSubmatch(src, -1) {
			names["sandboxd_"+m[1]+"_"+m[2]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !names["sandboxd_jobs_total"] {
		keys := make([]string, 0, len(names))
		for k := range names {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Fatalf("the source scan found no sandboxd_jobs_total (found %v): is it looking in the right place?", keys)
	}
	return names
}
