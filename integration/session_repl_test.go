//go:build integration

package integration

import (
	"bytes"
	"strings"
	"testing"
)

// TestLocalSessionThroughAPI: on the local runner (the default) a session
// keeps one Python interpreter between calls, as on the container runners.
func TestLocalSessionThroughAPI(t *testing.T) {
	checkSessionREPL(t, startServer(t, ""))
}

// checkSessionREPL runs a session through the API on s's runner: globals
// and imports persist, the trailing expression is the value, an exception
// fails its call, a matplotlib figure becomes a PNG artifact served by
// URL, a runaway cell is interrupted and the session keeps its state,
// files written by one call are read by the next, an effect the session
// lacks is refused.
func checkSessionREPL(t *testing.T, s *server) {
	t.Helper()
	var ses struct {
		ID      string   `json:"id"`
		State   string   `json:"state"`
		Effects []string `json:"effects"`
	}
	resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"}}, &ses)
	if resp.StatusCode != 201 || ses.ID == "" {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	call := func(tool string, args map[string]any) jobView {
		t.Helper()
		var j jobView
		resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": tool, "arguments": args, "session_id": ses.ID}, &j)
		if resp.StatusCode != 200 || j.Result == nil {
			t.Fatalf("%s in session: %d %s", tool, resp.StatusCode, data)
		}
		return j
	}
	// State persists in one interpreter; the trailing expression is the value.
	call("python_repl", map[string]any{"code": "import numpy as np\nacc = np.arange(10)"})
	j := call("python_repl", map[string]any{"code": "int(acc.sum())"})
	if !j.Result.OK || !strings.Contains(j.Result.Content, "45") {
		t.Fatalf("REPL state did not persist: %+v", j.Result)
	}
	j = call("python_repl", map[string]any{"code": "undefined_name"})
	if j.Result.OK || !strings.Contains(j.Result.Content+j.Result.Error, "NameError") {
		t.Fatalf("exception should be a failed result with a traceback: %+v", j.Result)
	}
	// A matplotlib figure becomes a PNG artifact (for the program, not the model).
	j = call("python_repl", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"})
	if !j.Result.OK || len(j.Result.Artifacts) != 1 || j.Result.Artifacts[0].MimeType != "image/png" ||
		len(j.Result.Artifacts[0].Data) != 0 || j.Result.Artifacts[0].URL == "" {
		t.Fatalf("matplotlib figure: ok=%v artifacts=%+v content=%q error=%q", j.Result.OK, j.Result.Artifacts, j.Result.Content, j.Result.Error)
	}
	if code, png := s.raw("GET", j.Result.Artifacts[0].URL, nil, ""); code != 200 || !bytes.HasPrefix(png, []byte("\x89PNG")) ||
		int64(len(png)) != j.Result.Artifacts[0].Size {
		t.Fatalf("GET %s: %d, %d bytes", j.Result.Artifacts[0].URL, code, len(png))
	}
	// A runaway cell is interrupted by its timeout; the session keeps its state.
	j = call("python_repl", map[string]any{"code": "while True: pass", "timeout_seconds": 1})
	if j.Result.OK || j.Reason != "timeout" || !strings.Contains(j.Result.Error, "timed out") {
		t.Fatalf("runaway cell: reason %q result %+v", j.Reason, j.Result)
	}
	j = call("python_repl", map[string]any{"code": "int(acc.sum())"})
	if !j.Result.OK || !strings.Contains(j.Result.Content, "45") {
		t.Fatalf("state lost after an interrupted cell: %+v", j.Result)
	}
	// Files written by one call are read by the next.
	call("bash", map[string]any{"command": "echo from-bash > note.txt"})
	j = call("read_file", map[string]any{"path": "note.txt"})
	if !strings.Contains(j.Result.Content, "from-bash") {
		t.Fatalf("read_file after bash: %+v", j.Result)
	}
	// An effect the session lacks is refused.
	resp, data = s.do("POST", "/v1/jobs", "", map[string]any{"tool": "http_request", "arguments": map[string]any{"url": "http://127.0.0.1:1/"}, "session_id": ses.ID}, nil)
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || !strings.Contains(string(data), "http") {
		t.Fatalf("http_request in a session without http: %d %s", resp.StatusCode, data)
	}
	resp, _ = s.do("DELETE", "/v1/sessions/"+ses.ID, "", nil, nil)
	if resp.StatusCode >= 300 {
		t.Fatalf("delete session: %d", resp.StatusCode)
	}
}
