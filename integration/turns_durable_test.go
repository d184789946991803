//go:build integration

package integration

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// durablePolicy is approvalPolicy's acme (bash needs a human) and a
// second tenant.
const durablePolicy = approvalPolicy + `  - name: beta
    api_keys: [k-beta]
`

// A batch waiting for an approval survives a crash: sandboxd is killed
// with SIGKILL and started on the same data dir; the batch is still
// there (another tenant gets 404), the pending call is approved, and GET
// with ?wait= answers the next turn's messages in the turn's dialect
// (Anthropic), the calls run in their order after the restart.
func TestTurnBatchSurvivesRestart(t *testing.T) {
	s := startServer(t, durablePolicy)
	body := `{"type":"message","role":"assistant","stop_reason":"tool_use","content":[
		{"type":"tool_use","id":"toolu_1","name":"calculator","input":{"expression":"6*7"}},
		{"type":"tool_use","id":"toolu_2","name":"bash","input":{"command":"echo approved after the crash"}},
		{"type":"tool_use","id":"toolu_3","name":"no_such_tool","input":{}},
		{"type":"tool_use","id":"toolu_4","name":"python_repl","input":{"code":"print(40+2)"}}]}`
	code, tv, raw := s.postTurn("k-acme", "", body)
	if code != 202 || tv.State != "pending_approval" || tv.Dialect != "anthropic" {
		t.Fatalf("submit: %d %s", code, raw)
	}
	id := tv.ID

	s.stop(syscall.SIGKILL)
	s.start()

	code, cur := s.getTurn("k-acme", id, "0s")
	if code != 202 || cur.State != "pending_approval" || cur.Calls[0].JobID != "" || cur.Calls[1].JobID != tv.Calls[1].JobID {
		t.Fatalf("after the restart: %d %+v", code, cur)
	}
	if resp, data := s.do("GET", "/v1/tool-calls/"+id, "k-beta", nil, nil); resp.StatusCode != 404 {
		t.Fatalf("another tenant's batch: %d %s", resp.StatusCode, data)
	}
	var page struct {
		Approvals []struct {
			ID    string `json:"id"`
			JobID string `json:"job_id"`
		} `json:"approvals"`
	}
	s.do("GET", "/v1/approvals?state=pending", "k-acme", nil, &page)
	if len(page.Approvals) != 1 || page.Approvals[0].JobID != tv.Calls[1].JobID {
		t.Fatalf("approvals after the restart %+v", page.Approvals)
	}
	if resp, data := s.do("POST", "/v1/approvals/"+page.Approvals[0].ID, "k-acme", map[string]any{"decision": "approve"}, nil); resp.StatusCode != 200 {
		t.Fatalf("approve: %d %s", resp.StatusCode, data)
	}
	code, done := s.getTurn("k-acme", id, "60s")
	if code != 200 || done.State != "completed" || done.Dialect != "anthropic" || len(done.Messages) != 1 {
		t.Fatalf("after approval: %d %+v", code, done)
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
	if err := json.Unmarshal(done.Messages[0], &user); err != nil || user.Role != "user" || len(user.Content) != 4 {
		t.Fatalf("messages %s (%v)", done.Messages[0], err)
	}
	want := []struct {
		id, content string
		isError     bool
	}{{"toolu_1", "42", false}, {"toolu_2", "approved after the crash", false}, {"toolu_3", "no_such_tool", true}, {"toolu_4", "42", false}}
	for i, w := range want {
		b := user.Content[i]
		if b.Type != "tool_result" || b.ToolUseID != w.id || b.IsError != w.isError || !strings.Contains(b.Content, w.content) {
			t.Errorf("message block %d: %+v, want %s containing %q (is_error %v)", i, b, w.id, w.content, w.isError)
		}
	}
	// GET once more: the same answer.
	if code, again := s.getTurn("k-acme", id, "0s"); code != 200 || string(again.Messages[0]) != string(done.Messages[0]) {
		t.Fatalf("GET again: %d %+v", code, again)
	}
}

// Two replicas on one Postgres: a batch made on one is answered by the
// other (from the store), waiting with ?wait= until it completes.
func TestReplicasTurnOnAnyReplica(t *testing.T) {
	pg := pgtest.Start(t)
	rs := startReplicas(t, pg.NewDatabase(t), 2)
	body := `[` + chatCall("c1", "calculator", `{"expression":"6*7"}`) + "," +
		chatCall("c2", "python_repl", `{"code":"import time; time.sleep(1); print('slept')"}`) + "," +
		chatCall("c3", "calculator", `{"expression":"1/0"}`) + `]`
	code, tv, raw := rs[0].postTurn("", "?wait=0s", body)
	if code != 202 && code != 200 {
		t.Fatalf("submit on replica 1: %d %s", code, raw)
	}
	code, other := rs[1].getTurn("", tv.ID, "60s")
	if code != 200 || other.State != "completed" || other.Dialect != "openai_chat" || len(other.Messages) != 3 {
		t.Fatalf("on replica 2: %d %+v", code, other)
	}
	_, mine := rs[0].getTurn("", tv.ID, "60s")
	for i := range mine.Messages {
		if string(other.Messages[i]) != string(mine.Messages[i]) {
			t.Errorf("message %d on replica 2 %s, on replica 1 %s", i, other.Messages[i], mine.Messages[i])
		}
	}
	if !strings.Contains(string(other.Messages[1]), "slept") || !other.Calls[2].IsError {
		t.Errorf("answers on replica 2: %+v", other)
	}
}

// A replica kill -9'd in the middle of a batch (one call at a time here,
// so two were not submitted yet): once its lease (2 s) expires, the
// replica that takes it over resumes the batch: the two calls r1 had not
// submitted run there, and no call runs twice.
func TestReplicasTurnResumedAfterKill(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	const cfg = "turns:\n  concurrency: 1\n"
	r1 := startServerArgs(t, cfg, "--store", dsn, "--replica-id", "r1", "--replica-lease", "2s")
	r2 := startServerArgs(t, cfg, "--store", dsn, "--replica-id", "r2", "--replica-lease", "2s")
	body := `[` + chatCall("c1", "bash", `{"command":"sleep 5; echo slept"}`) + "," +
		chatCall("c2", "calculator", `{"expression":"6*7"}`) + "," +
		chatCall("c3", "calculator", `{"expression":"2**10"}`) + `]`
	code, tv, raw := r1.postTurn("", "?wait=0s", body)
	if code != 202 && code != 200 {
		t.Fatalf("submit on replica 1: %d %s", code, raw)
	}
	time.Sleep(time.Second) // the first call runs on r1
	r1.stop(syscall.SIGKILL)
	code, got := r2.getTurn("", tv.ID, "60s")
	if code != 200 || got.State != "completed" || len(got.Calls) != 3 {
		t.Fatalf("on replica 2: %d %+v", code, got)
	}
	// The first call's job was queued for any replica: lost when r1 ran
	// it, succeeded when r2 claimed it.
	if c := got.Calls[0]; c.State != "succeeded" && (c.State != "failed" || c.Reason != "lost") {
		t.Errorf("the first call: %s/%s", c.State, c.Reason)
	}
	if !strings.Contains(string(got.Messages[1]), "42") || !strings.Contains(string(got.Messages[2]), "1024") {
		t.Errorf("the resumed calls' answers: %s, %s", got.Messages[1], got.Messages[2])
	}
	runs := runsPerJob(t, dsn)
	for _, c := range got.Calls {
		if runs[c.JobID] > 1 {
			t.Errorf("job %s ran %d times", c.JobID, runs[c.JobID])
		}
	}
	if !strings.Contains(r2.log.String(), "took over the turn batches of a replica") {
		t.Error("r2 did not log taking over the batch")
	}
}
