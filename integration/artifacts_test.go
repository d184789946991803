//go:build integration

package integration

import (
	"bytes"
	"net/http"
	"syscall"
	"testing"
)

// TestArtifactByURL: a matplotlib figure made in a Docker session is stored
// apart from the job (the job holds name, type, size and URL, no data),
// served at its URL to the owning tenant only, and still served after a
// restart.
func TestArtifactByURL(t *testing.T) {
	needDocker(t)
	s := startServer(t, dockerConfig("pool:\n  size: 0\ntenants:\n  - name: alice\n    api_keys: [key-alice]\n  - name: bob\n    api_keys: [key-bob]\n"))
	var ses struct {
		ID string `json:"id"`
	}
	if resp, data := s.do("POST", "/v1/sessions", "key-alice", map[string]any{}, &ses); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "key-alice", map[string]any{"tool": "python_repl", "session_id": ses.ID,
		"arguments": map[string]any{"code": "import matplotlib.pyplot as plt\nplt.figure(); plt.plot([1, 3, 2])\nplt.figure(); plt.plot([2, 1])"}}, &j)
	if resp.StatusCode != 200 || j.Result == nil || !j.Result.OK || len(j.Result.Artifacts) != 2 {
		t.Fatalf("figures: %d %s", resp.StatusCode, data)
	}
	if bytes.Contains(data, []byte(`"data"`)) {
		t.Fatalf("artifact data inlined in the job: %.300s", data)
	}
	get := func(url, key string) (int, []byte, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes(), resp.Header.Get("Content-Type")
	}
	check := func(when string) {
		t.Helper()
		for _, a := range j.Result.Artifacts {
			code, body, ct := get(a.URL, "key-alice")
			if code != 200 || ct != "image/png" || !bytes.HasPrefix(body, []byte("\x89PNG")) || int64(len(body)) != a.Size {
				t.Fatalf("%s: GET %s as alice: %d %s, %d bytes (size %d)", when, a.URL, code, ct, len(body), a.Size)
			}
			if code, body, _ := get(a.URL, "key-bob"); code != 404 {
				t.Fatalf("%s: GET %s as bob: %d %s", when, a.URL, code, body)
			}
		}
	}
	check("before the restart")
	s.do("DELETE", "/v1/sessions/"+ses.ID, "key-alice", nil, nil)
	s.stop(syscall.SIGTERM)
	s.start()
	check("after the restart")
}
