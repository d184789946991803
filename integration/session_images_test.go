//go:build integration

package integration

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSessionImagesThroughAPI is issue 9 item 6: POST /v1/sessions may name
// only the runner's configured image or one the operator lists for the
// tenant (tenants[].images). An image merely present on the host (a bare
// Debian image in Docker, another image imported into containerd, the
// host's / as a local rootfs) is a 400 naming the allowed images; a
// malformed reference is a 400 too, not a 500; neither creates anything.
func TestSessionImagesThroughAPI(t *testing.T) {
	tenants := func(images string) string {
		return `
tenants:
  - name: acme
    api_keys: [k-acme]
    images: [` + images + `]
  - name: free
    api_keys: [k-free]
`
	}
	for _, rc := range []struct {
		name, config, allowed string
		refused, malformed    []string
		extra                 string // an image acme may name (besides the default)
	}{
		{name: "local", config: tenants("/nonexistent-rootfs"), allowed: "(omit image",
			refused: []string{"/", "/etc", "/nonexistent-rootfs/../"}, malformed: []string{"relative/path", "sandboxd/python"}},
		{name: "docker", config: dockerConfig("pool:\n  size: 0\n") + tenants("sandboxd/base:latest"), allowed: "docker.io/sandboxd/python:latest",
			refused:   []string{"sandboxd/debian:bookworm", "debian", "sandboxd/python:c135de718e51"},
			malformed: []string{"NOT A REFERENCE", "sandboxd/Python", "sandboxd/python:", "a@sha256:xyz"}, extra: "sandboxd/base"},
		{name: "containerd", config: runtimeConfig("containerd", "") + tenants("sandboxd/base:latest"), allowed: "docker.io/sandboxd/python:latest",
			refused:   []string{"sandboxd/debian:bookworm", "docker.io/sandboxd/base:other"},
			malformed: []string{"NOT A REFERENCE", "x:y:z"}, extra: "docker.io/sandboxd/base:latest"},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if rc.name == "docker" {
				needDocker(t)
			}
			s := startServer(t, rc.config)
			create := func(key, image string) (int, []byte) {
				resp, data := s.do("POST", "/v1/sessions", key, map[string]any{"image": image}, nil)
				return resp.StatusCode, data
			}
			for _, key := range []string{"k-acme", "k-free"} {
				for _, img := range append(append([]string{}, rc.refused...), rc.malformed...) {
					code, data := create(key, img)
					var e struct {
						Error struct{ Code, Message string }
					}
					json.Unmarshal(data, &e)
					if code != 400 || e.Error.Code != "invalid_request" {
						t.Errorf("%s image %q: %d %s, want 400", key, img, code, data)
						continue
					}
					if !strings.Contains(e.Error.Message, rc.allowed) {
						t.Errorf("%s image %q: %q does not name the allowed images (%s)", key, img, e.Error.Message, rc.allowed)
					}
				}
			}
			// A tenant without images of its own may not name acme's.
			if rc.extra != "" {
				if code, data := create("k-free", rc.extra); code != 400 {
					t.Errorf("free naming %s: %d %s", rc.extra, code, data)
				}
			}
			var list struct{ Sessions []struct{ ID string } }
			s.do("GET", "/v1/sessions", "k-acme", nil, &list)
			if len(list.Sessions) != 0 {
				t.Fatalf("refused images left sessions: %+v", list.Sessions)
			}
			if m := s.getMetrics(); strings.Contains(string(m), `sandboxd_sessions_closed_total{reason="create_failed"}`) {
				t.Errorf("the runner was asked for refused sessions")
			}

			// What the operator allows runs: the default (omitted or named)
			// and acme's own image.
			good := []string{""}
			if rc.name != "local" {
				good = append(good, "sandboxd/python:latest", rc.extra)
			}
			for _, img := range good {
				var sess struct{ ID, Image string }
				resp, data := s.do("POST", "/v1/sessions", "k-acme", map[string]any{"image": img}, &sess)
				if resp.StatusCode != 201 {
					t.Fatalf("image %q: %d %s", img, resp.StatusCode, data)
				}
				var j jobView
				resp, data = s.do("POST", "/v1/jobs?wait=true", "k-acme", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo ran-$((6*7))"}, "session_id": sess.ID}, &j)
				if resp.StatusCode != 200 || j.Result == nil || !strings.Contains(j.Result.Content, "ran-42") {
					t.Errorf("image %q: %d %s", img, resp.StatusCode, data)
				}
				s.do("DELETE", "/v1/sessions/"+sess.ID, "k-acme", nil, nil)
			}
		})
	}
}
