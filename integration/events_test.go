//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sseEvent is one event of /v1/jobs/{id}/events.
type sseEvent struct {
	ID   int
	Type string
	Data string // the output chunk of stdout/stderr events
	Job  *struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
}

// events reads a job's event stream to its end (the finished event) with
// Last-Event-ID lastID (< 0: none), within d.
func (s *server) events(id string, lastID int, d time.Duration) []sseEvent {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/jobs/"+id+"/events", nil)
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("events of %s: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("events of %s: %d %s", id, resp.StatusCode, b)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.ID, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
		case strings.HasPrefix(line, "data: "):
			var v struct {
				Data string `json:"data"`
				Job  *struct {
					State  string `json:"state"`
					Reason string `json:"reason"`
				} `json:"job"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				s.t.Fatalf("event data %q: %v", line, err)
			}
			cur.Data, cur.Job = v.Data, v.Job
		case line == "" && cur.Type != "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	if ctx.Err() != nil {
		s.t.Fatalf("events of %s did not end within %s (got %d events)", id, d, len(out))
	}
	return out
}

func output(evs []sseEvent, typ string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == typ {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

func summary(evs []sseEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d:%s:%d ", ev.ID, ev.Type, len(ev.Data))
	}
	return b.String()
}

// TestSSEReplayAcrossRestart: a finished job's events, output included,
// are replayed from the store after a restart exactly as before it, and
// Last-Event-ID resumes at the same place.
func TestSSEReplayAcrossRestart(t *testing.T) {
	s := startServer(t, "")
	id := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{
		"command": "for i in $(seq 1 40); do echo line $i; echo err $i >&2; sleep 0.005; done"}})
	live := s.events(id, -1, time.Minute)
	if len(live) < 4 || live[0].Type != "queued" || live[1].Type != "started" || live[len(live)-1].Type != "finished" ||
		!strings.Contains(output(live, "stdout"), "line 40\n") || !strings.Contains(output(live, "stderr"), "err 40\n") {
		t.Fatalf("live events: %s", summary(live))
	}
	s.stop(syscall.SIGTERM)
	s.start()

	replay := s.events(id, -1, time.Minute)
	if summary(replay) != summary(live) || output(replay, "stdout") != output(live, "stdout") || output(replay, "stderr") != output(live, "stderr") {
		t.Fatalf("replay after restart differs:\n live   %s\n replay %s", summary(live), summary(replay))
	}
	if f := replay[len(replay)-1]; f.Job == nil || f.Job.State != "succeeded" {
		t.Fatalf("finished event after restart: %+v", f)
	}
	mid := live[len(live)/2].ID
	rest := s.events(id, mid, time.Minute)
	if len(rest) == 0 || rest[0].ID != mid+1 || summary(rest) != summary(live[len(live)/2+1:]) {
		t.Fatalf("Last-Event-ID %d after restart: %s", mid, summary(rest))
	}
}

// TestEventsOfJobRunningAtCrash: the output a job wrote before sandboxd was
// killed is still in its events after the restart, closed by the finished
// event of the lost job.
func TestEventsOfJobRunningAtCrash(t *testing.T) {
	s := startServer(t, "")
	id := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo before-crash; sleep 977"}})
	s.waitState(id, "running", 20*time.Second)
	time.Sleep(500 * time.Millisecond) // the output is written and its batch committed (5 ms)
	s.stop(syscall.SIGKILL)
	s.start()
	evs := s.events(id, -1, time.Minute)
	if !strings.Contains(output(evs, "stdout"), "before-crash") {
		t.Fatalf("output before the crash lost: %s", summary(evs))
	}
	f := evs[len(evs)-1]
	if f.Type != "finished" || f.Job == nil || f.Job.State != "failed" || f.Job.Reason != "lost" || evs[0].Type != "queued" {
		t.Fatalf("events of the lost job: %s, last %+v", summary(evs), f)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			t.Fatalf("event ids not increasing: %s", summary(evs))
		}
	}
}

// TestEventsOutputCap: the stored events of a stream keep the job's output
// cap, head and tail, with the runner's marker between them, like the
// result; the live stream saw all of it.
func TestEventsOutputCap(t *testing.T) {
	s := startServer(t, "")
	const limit = 64 << 10
	var j jobView
	resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "bash",
		"arguments": map[string]any{"command": "seq 1 200000"}, "limits": map[string]any{"output_bytes": limit}}, &j)
	if resp.StatusCode != 200 || j.Result == nil || !j.Result.Process.OutputTruncated {
		t.Fatalf("flood job: %d %s", resp.StatusCode, data[:min(len(data), 500)])
	}
	out := output(s.events(j.ID, -1, time.Minute), "stdout")
	head, tail, ok := strings.Cut(out, "\n[... ")
	if !ok || !strings.HasPrefix(head, "1\n2\n3\n") || !strings.HasSuffix(tail, "199999\n200000\n") || !strings.Contains(tail, " bytes truncated ...]\n") {
		t.Fatalf("stored stdout is not head + marker + tail: %d bytes, %q ... %q", len(out), out[:min(len(out), 40)], out[max(0, len(out)-80):])
	}
	if len(out) > limit+100 {
		t.Fatalf("stored stdout %d bytes, cap %d", len(out), limit)
	}
}
