//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// napYAML is a custom tool that is not parallel-safe: batches with it run
// in order.
const napYAML = `name: nap
description: Sleep a while, then say so.
input_schema: {type: object, properties: {s: {type: number}}, required: [s]}
argv: [/bin/sh, -c, 'sleep "$0"; echo napped "$0"', "{s}"]
parallel_safe: false
`

// turnsServer starts sandboxd with a tools directory (nap) and the MCP
// test server as a provider (its barrier and sleep tools parallel-safe).
func turnsServer(t *testing.T, extra string) (*server, string) {
	t.Helper()
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "nap.yaml"), []byte(napYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`tools_dir: %s
providers:
  - name: mcp
    command: [/workspace/mcp-testserver]
    workspace: %s
    effects: [exec, file_read]
    start: boot
    restart_backoff: 200ms
    tools:
      barrier: {parallel_safe: true}
      sleep: {parallel_safe: true}
%s`, tools, providerDir(t), extra)
	s := startServer(t, cfg)
	waitProviderReady(t, s, "mcp")
	return s, tools
}

func waitProviderReady(t *testing.T, s *server, name string) {
	t.Helper()
	if err := waitMetric(s.MetricsURL, `sandboxd_provider_up{provider="`+name+`"}`, func(v float64) bool { return v == 1 }); err != nil {
		t.Fatal(err)
	}
}

func chatCall(id, name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, id, name, a)
}

// Batches in all four dialects: the answer comes back in the turn's own
// dialect, in the calls' order; parallel-safe tools run at the same time
// (their intervals overlap; a barrier inside the provider meets), others
// one after the other (never overlapping).
func TestTurnDialects(t *testing.T) {
	s, _ := turnsServer(t, "")

	// OpenAI chat: three one-shot python_repl calls outside a session run
	// together.
	body := `{"role":"assistant","content":null,"tool_calls":[` +
		chatCall("call_a", "python_repl", `{"code":"import time; time.sleep(1); print('a')"}`) + "," +
		chatCall("call_b", "python_repl", `{"code":"import time; time.sleep(1); print('b')"}`) + "," +
		chatCall("call_c", "python_repl", `{"code":"import time; time.sleep(1); print('c')"}`) + `]}`
	code, tv, raw := s.postTurn("", "", body)
	if code != 200 || tv.Dialect != "openai_chat" || tv.Mode != "parallel" || len(tv.Messages) != 3 {
		t.Fatalf("chat: %d %s", code, raw)
	}
	for i, id := range []string{"call_a", "call_b", "call_c"} {
		var m struct{ Role, ToolCallID, Content string }
		var mm map[string]string
		json.Unmarshal(tv.Messages[i], &mm)
		m.Role, m.ToolCallID, m.Content = mm["role"], mm["tool_call_id"], mm["content"]
		if m.Role != "tool" || m.ToolCallID != id || m.Content != string(rune('a'+i)) {
			t.Errorf("chat message %d: %s", i, tv.Messages[i])
		}
	}
	if n := overlaps(tv); n == 0 {
		t.Errorf("parallel python_repl calls never overlapped: %+v", tv.Calls)
	}
	if tv.Effects["exec"] != 3 || tv.Effects["file_write"] != 3 {
		t.Errorf("effects %v", tv.Effects)
	}

	// OpenAI Responses: nap is not parallel-safe, so the batch runs in
	// order and no two calls overlap.
	body = `{"object":"response","output":[{"type":"reasoning","id":"rs_1","summary":[]},` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"nap","arguments":"{\"s\":0.3}"},` +
		`{"type":"function_call","id":"fc_2","call_id":"call_2","name":"calculator","arguments":"{\"expression\":\"6*7\"}"},` +
		`{"type":"function_call","id":"fc_3","call_id":"call_3","name":"nap","arguments":"{\"s\":0.3}"}]}`
	code, tv, raw = s.postTurn("", "", body)
	if code != 200 || tv.Dialect != "openai_responses" || tv.Mode != "serial" {
		t.Fatalf("responses: %d %s", code, raw)
	}
	if n := overlaps(tv); n != 0 {
		t.Errorf("a serial batch overlapped (%d pairs): %+v", n, tv.Calls)
	}
	want := []string{`{"call_id":"call_1","output":"napped 0.3","type":"function_call_output"}`,
		`{"call_id":"call_2","output":"42","type":"function_call_output"}`,
		`{"call_id":"call_3","output":"napped 0.3","type":"function_call_output"}`}
	for i, w := range want {
		if string(tv.Messages[i]) != w {
			t.Errorf("responses message %d: %s, want %s", i, tv.Messages[i], w)
		}
	}

	// Anthropic: three calls of the provider's barrier meet only if they
	// are in flight together; a call without an id gets one.
	body = `{"id":"msg_1","type":"message","role":"assistant","stop_reason":"tool_use","content":[
		{"type":"text","text":"Waiting for all three."},
		{"type":"tool_use","id":"toolu_1","name":"mcp__barrier","input":{"n":3,"timeout_ms":20000}},
		{"type":"tool_use","id":"toolu_2","name":"mcp__barrier","input":{"n":3,"timeout_ms":20000}},
		{"type":"tool_use","name":"mcp__barrier","input":{"n":3,"timeout_ms":20000}}]}`
	code, tv, raw = s.postTurn("", "", body)
	if code != 200 || tv.Dialect != "anthropic" || tv.Mode != "parallel" || len(tv.Messages) != 1 {
		t.Fatalf("anthropic: %d %s", code, raw)
	}
	var user struct {
		Role    string `json:"role"`
		Content []struct {
			Type      string `json:"type"`
			ToolUseID string `json:"tool_use_id"`
			Content   string `json:"content"`
			IsError   bool   `json:"is_error"`
		} `json:"content"`
	}
	json.Unmarshal(tv.Messages[0], &user)
	if user.Role != "user" || len(user.Content) != 3 || !tv.Calls[2].Generated || user.Content[2].ToolUseID != tv.Calls[2].CallID {
		t.Fatalf("anthropic answer %s", tv.Messages[0])
	}
	for i, b := range user.Content {
		if b.Type != "tool_result" || b.Content != "met" || b.IsError {
			t.Errorf("barrier %d: %+v (the calls did not run together)", i, b)
		}
	}

	// ReAct text: the observation; the Action Input repaired; plain text
	// input for a single-string tool.
	code, tv, raw = s.postTurn("", "", "Thought: I need the sum.\nAction: calculator\nAction Input: {'expression': '2 + 2',}\n")
	if code != 200 || tv.Dialect != "react" || tv.Text == nil || *tv.Text != "Observation: 4" {
		t.Fatalf("react: %d %s", code, raw)
	}
	code, tv, raw = s.postTurn("", "", `{"text":"Thought: list\nAction: bash\nAction Input: echo plain text"}`)
	if code != 200 || tv.Text == nil || *tv.Text != "Observation: plain text" {
		t.Fatalf("react plain: %d %s", code, raw)
	}
	code, tv, raw = s.postTurn("", "", "Thought: done.\nFinal Answer: 42")
	if code != 200 || len(tv.Calls) != 0 || tv.Final == nil || *tv.Final != "42" {
		t.Fatalf("react final: %d %s", code, raw)
	}

	// sandboxd turn < turn.json prints the next messages.
	f := filepath.Join(t.TempDir(), "turn.json")
	os.WriteFile(f, []byte(`[`+chatCall("call_z", "calculator", `{"expression":"1+2"}`)+`]`), 0o644)
	cmd := exec.Command(binPath, "turn", "--url", s.URL)
	in, _ := os.Open(f)
	defer in.Close()
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"tool_call_id": "call_z"`) || !strings.Contains(string(out), `"content": "3"`) {
		t.Errorf("sandboxd turn: %v\n%s", err, out)
	}
}

const approvalPolicy = `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      rules:
        - tool: bash
          action: confirm
          reason: shell commands need a human
        - tool: write_file
          action: deny
          reason: this agent may not write files
      budgets:
        - effect: http
          limit: 1
          per: 1h
`

// An approval holds the whole batch: nothing runs (the allowed calls have
// no job yet) until the human decides; then every call is answered, the
// approved one in its place.
func TestTurnApprovalHoldsBatch(t *testing.T) {
	s := startServer(t, approvalPolicy)
	body := `[` + chatCall("c1", "python_repl", `{"code":"print('first')"}`) + "," +
		chatCall("c2", "bash", `{"command":"echo approved"}`) + "," +
		chatCall("c3", "calculator", `{"expression":"1+1"}`) + `]`
	code, tv, raw := s.postTurn("k-acme", "", body)
	if code != 202 || tv.State != "pending_approval" || tv.Messages != nil {
		t.Fatalf("submit: %d %s", code, raw)
	}
	if tv.Calls[0].State != "held" || tv.Calls[0].JobID != "" || tv.Calls[1].State != "pending_approval" || tv.Calls[2].JobID != "" {
		t.Fatalf("calls while held: %s", raw)
	}
	time.Sleep(300 * time.Millisecond)
	var jobs struct {
		Jobs []struct{ Tool, State string } `json:"jobs"`
	}
	s.do("GET", "/v1/jobs", "k-acme", nil, &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Tool != "bash" || jobs.Jobs[0].State != "pending_approval" {
		t.Fatalf("jobs while the batch waits: %+v", jobs.Jobs)
	}
	if c, cur := s.getTurn("k-acme", tv.ID, "200ms"); c != 202 || cur.State != "pending_approval" {
		t.Fatalf("GET while waiting: %d %+v", c, cur)
	}
	var page struct {
		Approvals []struct {
			ID    string `json:"id"`
			JobID string `json:"job_id"`
		} `json:"approvals"`
	}
	s.do("GET", "/v1/approvals?state=pending", "k-acme", nil, &page)
	if len(page.Approvals) != 1 || page.Approvals[0].JobID != tv.Calls[1].JobID {
		t.Fatalf("approvals %+v", page.Approvals)
	}
	if resp, data := s.do("POST", "/v1/approvals/"+page.Approvals[0].ID, "k-acme", map[string]any{"decision": "approve"}, nil); resp.StatusCode != 200 {
		t.Fatalf("approve: %d %s", resp.StatusCode, data)
	}
	code, tv = s.getTurn("k-acme", tv.ID, "60s")
	if code != 200 || tv.State != "completed" || tv.Mode != "parallel" {
		t.Fatalf("after approval: %d %+v", code, tv)
	}
	for i, want := range []string{"first", "approved", "2"} {
		if c := tv.Calls[i]; !c.OK || strings.TrimSpace(c.Content) != want || c.JobID == "" {
			t.Errorf("call %d: %+v", i, c)
		}
	}

	// Denied by the reviewer: that call's message says so, the others run.
	code, tv, raw = s.postTurn("k-acme", "", `[`+chatCall("d1", "bash", `{"command":"echo no"}`)+","+chatCall("d2", "calculator", `{"expression":"3*3"}`)+`]`)
	if code != 202 || tv.State != "pending_approval" {
		t.Fatalf("submit to be denied: %d %s", code, raw)
	}
	s.do("GET", "/v1/approvals?state=pending", "k-acme", nil, &page)
	if len(page.Approvals) != 1 {
		t.Fatalf("approvals %+v", page.Approvals)
	}
	if resp, data := s.do("POST", "/v1/approvals/"+page.Approvals[0].ID, "k-acme", map[string]any{"decision": "deny", "reason": "not now"}, nil); resp.StatusCode != 200 {
		t.Fatalf("deny: %d %s", resp.StatusCode, data)
	}
	if code, tv = s.getTurn("k-acme", tv.ID, "60s"); code != 200 || tv.State != "completed" {
		t.Fatalf("after denial: %d %+v", code, tv)
	}
	if c := tv.Calls[0]; c.OK || c.Reason != "approval_denied" || c.Content != "Error: a reviewer denied the call: not now" {
		t.Errorf("denied approval: %+v", c)
	}
	if c := tv.Calls[1]; !c.OK || c.Content != "9" {
		t.Errorf("beside the denial: %+v", c)
	}
}

// A call the guard denies, or that exceeds a budget, becomes that call's
// error message; the others run.
func TestTurnDeniedBesideAllowed(t *testing.T) {
	s := startServer(t, approvalPolicy)
	body := `{"role":"assistant","content":[
		{"type":"tool_use","id":"t1","name":"calculator","input":{"expression":"10/4"}},
		{"type":"tool_use","id":"t2","name":"write_file","input":{"path":"a.txt","content":"x"}},
		{"type":"tool_use","id":"t3","name":"http_request","input":{"url":"http://127.0.0.1:1/"}},
		{"type":"tool_use","id":"t4","name":"http_request","input":{"url":"http://127.0.0.1:1/"}},
		{"type":"tool_use","id":"t5","name":"python_repl","input":{"code":"print(5)"}}]}`
	code, tv, raw := s.postTurn("k-acme", "", body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	want := []struct{ reason, content string }{
		{"", "2.5"},
		{"denied", "Error: refused by policy: this agent may not write files"},
		{"tool_error", "Error: request refused"}, // spends the one http unit (the address is refused: nothing is sent)
		{"budget_exhausted", "Error: refused by policy: "},
		{"", "5"},
	}
	for i, w := range want {
		c := tv.Calls[i]
		if c.Reason != w.reason || !strings.HasPrefix(c.Content, w.content) {
			t.Errorf("call %d: reason %q content %q, want %q %q", i, c.Reason, c.Content, w.reason, w.content)
		}
	}
	if !tv.Calls[1].IsError || tv.Calls[0].IsError {
		t.Errorf("is_error: %+v", tv.Calls)
	}
	if tv.Effects["http"] != 1 {
		t.Errorf("effects %v", tv.Effects)
	}
}

// Arguments are repaired like single calls' are; unrepairable ones and
// schema violations get an answer naming the field and what was expected.
func TestTurnArguments(t *testing.T) {
	s := startServer(t, "")
	body := `{"role":"assistant","tool_calls":[` +
		chatCall("r1", "calculator", `{'expression': '7 * 6',}`) + "," +
		chatCall("r2", "read_file", `{"path": 7}`) + "," +
		chatCall("r3", "calculator", `{"expression": [1, `) + "," +
		chatCall("r4", "pyhton_repl", `{"code":"1"}`) + `]}`
	code, tv, raw := s.postTurn("", "", body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if c := tv.Calls[0]; !c.OK || c.Content != "42" {
		t.Errorf("repaired: %+v", c)
	}
	if c := tv.Calls[1]; c.State != "invalid" || len(c.Details) != 1 || c.Details[0].Field != "/path" ||
		c.Content != "Error: invalid arguments for read_file: /path: expected string, got number. Correct the arguments and call read_file again." {
		t.Errorf("schema violation: %+v", c)
	}
	if c := tv.Calls[2]; c.State != "invalid" || !strings.HasPrefix(c.Content, "Error: invalid arguments for calculator") {
		t.Errorf("unrepairable: %+v", c)
	}
	if c := tv.Calls[3]; c.State != "invalid" || !strings.Contains(c.Content, `did you mean "python_repl"`) {
		t.Errorf("unknown tool: %+v", c)
	}
	// A body in no dialect is a 400, a malformed one too.
	if code, _, raw := s.postTurn("", "", `{"foo": 1}`); code != 400 {
		t.Errorf("no dialect: %d %s", code, raw)
	}
}

// Artifacts stay out of the model's text: the message says what was
// produced, the bytes are at the URL under the job.
func TestTurnArtifactsByURL(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "chart.py"), []byte(`import base64
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")

def chart(title: str) -> tuple[str, bytes]:
    """Draw a chart of the sales.

    Args:
        title: The chart's title.
    """
    return f"drew {title}", PNG
`), 0o644)
	s := startServer(t, "tools_dir: "+tools+"\n")
	code, tv, raw := s.postTurn("", "", `[{"type":"tool_use","id":"p1","name":"chart","input":{"title":"Q3"}}]`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	c := tv.Calls[0]
	if !c.OK || len(c.Artifacts) != 1 || !strings.HasPrefix(c.Content, "drew Q3\n[produced ") || strings.Contains(c.Content, "/v1/") ||
		strings.Contains(string(tv.Messages[0]), "iVBOR") {
		t.Fatalf("call %+v\n%s", c, raw)
	}
	a := c.Artifacts[0]
	if a.MimeType != "image/png" || a.URL != "/v1/jobs/"+c.JobID+"/artifacts/"+a.Name {
		t.Fatalf("artifact %+v", a)
	}
	resp, err := http.Get(s.URL + a.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || !strings.HasPrefix(string(data), "\x89PNG") || int64(len(data)) != a.Size {
		t.Errorf("GET %s: %d %s %d bytes", a.URL, resp.StatusCode, resp.Header.Get("Content-Type"), len(data))
	}
}

// Infrastructure failures are retried, counted on the job, and never when
// the call may already have written something: the test breaks the
// workspace directory (no sandbox can be created: the call never starts),
// and kills a sandbox in the middle of a call.
func TestTurnRetries(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("chattr not available")
	}
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "wait.yaml"), []byte(`name: wait_read
description: Wait, then read nothing; safe to run twice.
input_schema: {type: object, properties: {s: {type: number}}, required: [s]}
argv: [/bin/sleep, "{s}"]
idempotent: true
`), 0o644)
	s := startServer(t, "tools_dir: "+tools+"\nturns: {retries: 5, retry_backoff: 400ms}\npool: {size: 0}\n") // every call makes its sandbox
	ws := filepath.Join(s.DataDir, "workspaces")
	os.MkdirAll(ws, 0o755)

	// 1. The runner cannot make a sandbox (the call provably never
	// started): retried even for python_repl, until the fault is gone.
	if out, err := exec.Command("chattr", "+i", ws).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	immutable := true
	defer func() {
		if immutable {
			exec.Command("chattr", "-i", ws).Run()
		}
	}()
	done := make(chan turnView, 1)
	go func() {
		_, tv, _ := s.postTurn("", "", `[`+chatCall("f1", "python_repl", `{"code":"print('made it')"}`)+`]`)
		done <- tv
	}()
	if err := waitMetric(s.MetricsURL, `sandboxd_job_infrastructure_failures_total{action="retried",tool="python_repl"}`, func(v float64) bool { return v >= 1 }); err != nil {
		t.Fatal(err)
	}
	exec.Command("chattr", "-i", ws).Run()
	immutable = false
	tv := <-done
	if c := tv.Calls[0]; !c.OK || strings.TrimSpace(c.Content) != "made it" || c.Attempts < 2 {
		t.Fatalf("after the fault: %+v", c)
	}
	var j struct{ Attempts int }
	s.do("GET", "/v1/jobs/"+tv.Calls[0].JobID, "", nil, &j)
	if j.Attempts != tv.Calls[0].Attempts {
		t.Errorf("job attempts %d, record %d", j.Attempts, tv.Calls[0].Attempts)
	}

	// 2. The sandbox dies in the middle of python_repl (it may have
	// written): not run again, and the answer says why.
	killMidRun := func(body string, match func(string) bool) turnView {
		done := make(chan turnView, 1)
		go func() {
			_, tv, _ := s.postTurn("", "", body)
			done <- tv
		}()
		pid := waitProc(t, s.cmd.Process.Pid, match)
		helper := parentOf(pid) // the sandbox's init: killing it takes the sandbox down
		if err := syscall.Kill(helper, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
	tv = killMidRun(`[`+chatCall("k1", "python_repl", `{"code":"import time\ntime.sleep(60)"}`)+`]`,
		func(cl string) bool { return strings.HasPrefix(cl, "/usr/bin/python3") })
	if c := tv.Calls[0]; c.OK || c.Reason != "internal" || c.Attempts != 1 ||
		!strings.Contains(c.Content, "not retried: the call may have started and python_repl may have done it already") {
		t.Errorf("killed python_repl: %+v", c)
	}
	// The same fault under a tool the operator marked idempotent: run again.
	tv = killMidRun(`[`+chatCall("k2", "wait_read", `{"s":1}`)+`]`, func(cl string) bool { return cl == "/bin/sleep 1" })
	if c := tv.Calls[0]; !c.OK || c.Attempts != 2 {
		t.Errorf("killed idempotent tool: %+v", c)
	}
}
