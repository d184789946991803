//go:build integration

package integration

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestResultCache: in a session, a second identical read_file is
// answered from the cache (cached, no file_read budget spent: of the
// budget of 3 the two reads that ran and the bash job spend all, the four
// hits nothing); a write or an exec job changes the workspace and the next
// read runs again (refused once the budget is spent, where a hit would
// still answer); the calculator's repeat
// hits too; bash never caches; hits and misses are in /metrics.
func TestResultCache(t *testing.T) {
	s := startServer(t, `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      budgets:
        - effect: file_read
          limit: 3
          per: 24h
`)
	var ses struct {
		ID string `json:"id"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "k-acme", map[string]any{}, &ses); resp.StatusCode != 201 {
		t.Fatalf("session: %d %s", resp.StatusCode, data)
	}
	put := func(content string) {
		t.Helper()
		req := map[string]any{"tool": "write_file", "session_id": ses.ID, "arguments": map[string]any{"path": "notes.txt", "content": content}}
		var j jobView
		if resp, data := s.do("POST", "/v1/jobs?wait=true", "k-acme", req, &j); resp.StatusCode != 200 || j.State != "succeeded" {
			t.Fatalf("write: %d %s", resp.StatusCode, data)
		}
	}
	read := func() jobView {
		t.Helper()
		var j jobView
		req := map[string]any{"tool": "read_file", "session_id": ses.ID, "arguments": map[string]any{"path": "notes.txt"}}
		if resp, data := s.do("POST", "/v1/jobs?wait=true", "k-acme", req, &j); resp.StatusCode != 200 {
			t.Fatalf("read: %d %s", resp.StatusCode, data)
		}
		return j
	}
	put("first")
	if j := read(); j.Cached || !j.Result.OK || !strings.Contains(j.Result.Content, "first") {
		t.Fatalf("first read: %+v", j)
	}
	for range 3 {
		if j := read(); !j.Cached || j.State != "succeeded" || !strings.Contains(j.Result.Content, "first") || len(j.Result.Effects) != 0 {
			t.Fatalf("repeated read: cached %v %+v", j.Cached, j.Result)
		}
	}
	put("second") // the workspace changed: the next read runs (and spends the budget's second unit)
	if j := read(); j.Cached || !strings.Contains(j.Result.Content, "second") {
		t.Fatalf("read after a write: cached %v %+v", j.Cached, j.Result)
	}
	if j := read(); !j.Cached {
		t.Fatalf("repeat after the write's read: %+v", j)
	}
	// An exec job changes the workspace too (and spends the third unit:
	// bash has file_read); the next read must run, and the budget refuses
	// it.
	var b jobView
	s.do("POST", "/v1/jobs?wait=true", "k-acme", map[string]any{"tool": "bash", "session_id": ses.ID,
		"arguments": map[string]any{"command": "echo third > third.txt"}}, &b)
	if b.State != "succeeded" {
		t.Fatalf("bash: %+v %q %q", b, b.Result.Content, b.Result.Error)
	}
	if j := read(); j.Cached || j.State != "failed" || j.Reason != "budget_exhausted" {
		t.Fatalf("read after exec with the budget spent: cached %v state %s reason %s %+v", j.Cached, j.State, j.Reason, j.Result)
	}
	calc := func() jobView { return s.run("k-acme", "calculator", map[string]any{"expression": "2**64"}) }
	if c1, c2 := calc(), calc(); c1.Cached || !c2.Cached || c2.Result.Content != c1.Result.Content {
		t.Errorf("calculator: %v %v", c1.Cached, c2.Cached)
	}
	if b1, b2 := s.run("k-acme", "bash", map[string]any{"command": "echo hi"}), s.run("k-acme", "bash", map[string]any{"command": "echo hi"}); b1.Cached || b2.Cached {
		t.Errorf("bash was cached")
	}

	m := string(s.getMetrics())
	count := func(tool, result string) float64 {
		re := regexp.MustCompile(`(?m)^sandboxd_tool_cache_total\{result="` + result + `",tool="` + tool + `"\} (\S+)$`)
		v := re.FindStringSubmatch(m)
		if v == nil {
			return 0
		}
		f, _ := strconv.ParseFloat(v[1], 64)
		return f
	}
	if h, mi := count("read_file", "hit"), count("read_file", "miss"); h != 4 || mi != 2 {
		t.Errorf("read_file hits %v misses %v, want 4 and 2 (the refused read was decided before the cache)", h, mi)
	}
	if h, mi := count("calculator", "hit"), count("calculator", "miss"); h != 1 || mi != 1 {
		t.Errorf("calculator hits %v misses %v", h, mi)
	}
	if strings.Contains(m, `tool="bash"`) && strings.Contains(m, "sandboxd_tool_cache_total{result=\"miss\",tool=\"bash\"}") {
		t.Error("bash counted in the cache")
	}
}
