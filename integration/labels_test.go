//go:build integration

package integration

import (
	"net/url"
	"reflect"
	"slices"
	"syscall"
	"testing"
)

// labelsView is the labels part of a job, session or batch.
type labelsView struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
	Calls    []struct {
		JobID string `json:"job_id"`
	} `json:"calls"`
}

// TestLabels: tags and metadata given to a job, a session and a turn are
// stored (read back from the store after a restart), returned, carried by
// a turn's call jobs, and filter GET /v1/jobs and GET /v1/sessions;
// labels past the configured bounds are a 400 that records nothing.
func TestLabels(t *testing.T) {
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
  - name: bob
    api_keys: [key-bob]
labels:
  max_tags: 3
`)
	submit := func(key string, body map[string]any) labelsView {
		t.Helper()
		var j labelsView
		if resp, data := s.do("POST", "/v1/jobs?wait=true", key, body, &j); resp.StatusCode != 200 {
			t.Fatalf("submit: %d %s", resp.StatusCode, data)
		}
		return j
	}
	calc := func(tags []string, md map[string]string) map[string]any {
		body := map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "6*7"}}
		if tags != nil { // a null member is refused: leave it out
			body["tags"] = tags
		}
		if md != nil {
			body["metadata"] = md
		}
		return body
	}
	a := submit("key-alice", calc([]string{"langchain", "run-1", "langchain"}, map[string]string{"run_id": "r-1", "trace.id": "t-1"}))
	if !slices.Equal(a.Tags, []string{"langchain", "run-1"}) || a.Metadata["run_id"] != "r-1" || a.Metadata["trace.id"] != "t-1" {
		t.Fatalf("job labels: %+v", a)
	}
	b := submit("key-alice", calc([]string{"langchain"}, map[string]string{"run_id": "r-2"}))
	plain := submit("key-alice", calc(nil, nil))
	if plain.Tags == nil || len(plain.Tags) != 0 || plain.Metadata == nil || len(plain.Metadata) != 0 {
		t.Fatalf("a job without labels shows %+v, want [] and {}", plain)
	}
	bobs := submit("key-bob", calc([]string{"langchain"}, map[string]string{"run_id": "r-1"}))

	var ses labelsView
	if resp, data := s.do("POST", "/v1/sessions", "key-alice", map[string]any{"tags": []string{"crewai"}, "metadata": map[string]string{"run_id": "r-1"}}, &ses); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	var other labelsView
	if resp, data := s.do("POST", "/v1/sessions", "key-alice", map[string]any{}, &other); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}

	// A turn's labels are the batch's and every call job's.
	var turn labelsView
	body := `{"role":"assistant","tags":["autogen"],"metadata":{"run_id":"r-3"},"tool_calls":[` +
		chatCall("c1", "calculator", `{"expression":"1+1"}`) + `,` + chatCall("c2", "calculator", `{"expression":"2+2"}`) + `]}`
	if resp, data := s.do("POST", "/v1/tool-calls", "key-alice", body, &turn); resp.StatusCode != 200 {
		t.Fatalf("turn: %d %s", resp.StatusCode, data)
	}
	if !slices.Equal(turn.Tags, []string{"autogen"}) || turn.Metadata["run_id"] != "r-3" || len(turn.Calls) != 2 {
		t.Fatalf("batch labels: %+v", turn)
	}

	jobIDs := func(key, query string) []string {
		t.Helper()
		var l struct {
			Jobs []labelsView `json:"jobs"`
		}
		if resp, data := s.do("GET", "/v1/jobs?"+query, key, nil, &l); resp.StatusCode != 200 {
			t.Fatalf("list jobs ?%s: %d %s", query, resp.StatusCode, data)
		}
		ids := []string{}
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	sessionIDs := func(query string) []string {
		t.Helper()
		var l struct {
			Sessions []labelsView `json:"sessions"`
		}
		if resp, data := s.do("GET", "/v1/sessions?"+query, "key-alice", nil, &l); resp.StatusCode != 200 {
			t.Fatalf("list sessions ?%s: %d %s", query, resp.StatusCode, data)
		}
		ids := []string{}
		for _, x := range l.Sessions {
			ids = append(ids, x.ID)
		}
		return ids
	}
	check := func() {
		t.Helper()
		turnJobs := []string{turn.Calls[1].JobID, turn.Calls[0].JobID}
		slices.Sort(turnJobs)
		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"tag=langchain", []string{b.ID, a.ID}},
			{"tag=langchain&tag=run-1", []string{a.ID}},
			{"metadata.run_id=r-1", []string{a.ID}},
			{"metadata.trace.id=t-1&tag=run-1", []string{a.ID}},
			{"tag=langchain&metadata.run_id=r-2", []string{b.ID}},
			{"tag=nope", []string{}},
			{"tag=" + url.QueryEscape("x' OR 1=1 --"), []string{}},
		} {
			if got := jobIDs("key-alice", tc.query); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("jobs ?%s = %v, want %v", tc.query, got, tc.want)
			}
		}
		got := jobIDs("key-alice", "tag=autogen&metadata.run_id=r-3")
		slices.Sort(got)
		if !reflect.DeepEqual(got, turnJobs) {
			t.Errorf("a turn's jobs by its labels: %v, want %v", got, turnJobs)
		}
		if got := jobIDs("key-bob", "tag=langchain"); !reflect.DeepEqual(got, []string{bobs.ID}) {
			t.Errorf("bob's jobs ?tag=langchain = %v, want only his own", got)
		}
		if got := sessionIDs("tag=crewai&metadata.run_id=r-1"); !reflect.DeepEqual(got, []string{ses.ID}) {
			t.Errorf("sessions by labels: %v, want %v", got, ses.ID)
		}
		if got := sessionIDs("metadata.run_id=r-2"); len(got) != 0 {
			t.Errorf("sessions ?metadata.run_id=r-2 = %v, want none", got)
		}
		var j labelsView
		s.do("GET", "/v1/jobs/"+a.ID, "key-alice", nil, &j)
		if !slices.Equal(j.Tags, a.Tags) || !reflect.DeepEqual(j.Metadata, a.Metadata) {
			t.Errorf("GET job: %+v, want %+v", j, a)
		}
	}
	check()

	// Refused: past a bound, a malformed key, a filter given twice.
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/jobs", calc([]string{"a", "b", "c", "d"}, nil)},
		{"POST", "/v1/jobs", calc(nil, map[string]string{"bad key": "v"})},
		{"POST", "/v1/jobs", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "1"}, "metadata": map[string]any{"n": 1}}},
		{"POST", "/v1/sessions", map[string]any{"tags": []string{""}}},
		{"POST", "/v1/tool-calls", `{"role":"assistant","tags":["a","b","c","d"],"tool_calls":[` + chatCall("c1", "calculator", `{"expression":"1"}`) + `]}`},
		{"GET", "/v1/jobs?metadata.run_id=a&metadata.run_id=b", nil},
		{"GET", "/v1/sessions?tag=", nil},
	} {
		if resp, data := s.do(tc.method, tc.path, "key-alice", tc.body, nil); resp.StatusCode != 400 {
			t.Errorf("%s %s %v: %d %s, want 400", tc.method, tc.path, tc.body, resp.StatusCode, data)
		}
	}
	if got := jobIDs("key-alice", ""); len(got) != 5 {
		t.Errorf("after refused requests alice has %d jobs, want 5", len(got))
	}

	// Stored: the same after a restart.
	s.stop(syscall.SIGTERM)
	s.start()
	check()
}
