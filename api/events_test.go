package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/job"
)

type sseEvent struct {
	Event, ID string
	Data      eventView
}

// readSSE parses a whole SSE body, counting heartbeat comments.
func readSSE(t *testing.T, body string) (events []sseEvent, heartbeats int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Event != "" {
				events = append(events, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ": "):
			heartbeats++
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return events, heartbeats
}

func TestEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Heartbeat: 10 * time.Millisecond})
	rec := h.do("POST", "/v1/jobs", `{"tool":"shell_exec","arguments":{"command":"echo hi"}}`)
	id := decodeJob(t, rec.Body.String()).ID
	go func() {
		h.fake.Start(id)
		time.Sleep(30 * time.Millisecond) // a heartbeat or two
		h.fake.Output(id, job.EventStdout, "hi\n")
		h.fake.Output(id, job.EventStderr, "warn\n")
		h.fake.Finish(id, okResult("hi\n"))
	}()
	rec = h.do("GET", "/v1/jobs/"+id+"/events", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %v", rec.Code, rec.Header())
	}
	events, heartbeats := readSSE(t, rec.Body.String())
	var types []string
	for _, ev := range events {
		types = append(types, ev.Event)
	}
	if got := strings.Join(types, ","); got != "queued,started,stdout,stderr,finished" {
		t.Fatalf("event types %s\n%s", got, rec.Body)
	}
	if heartbeats == 0 {
		t.Fatal("no heartbeat")
	}
	last := events[len(events)-1]
	if last.ID != "5" || last.Data.Job == nil || last.Data.Job.State != wire.StateSucceeded || events[2].Data.Data != "hi\n" {
		t.Fatalf("events %+v", events)
	}

	// Replay after Last-Event-ID of a finished job.
	rec = h.do("GET", "/v1/jobs/"+id+"/events", "", "Last-Event-ID: 3")
	events, _ = readSSE(t, rec.Body.String())
	if len(events) != 2 || events[0].Event != "stderr" {
		t.Fatalf("replay after 3: %+v", events)
	}
	if rec := h.do("GET", "/v1/jobs/"+id+"/events", "", "Last-Event-ID: x"); rec.Code != 400 {
		t.Fatalf("bad Last-Event-ID: %d", rec.Code)
	}
	if rec := h.do("GET", "/v1/jobs/nope/events", ""); rec.Code != 404 {
		t.Fatalf("missing job events: %d", rec.Code)
	}
}

// TestEventsFlushLive reads the stream through a real server to check that
// each event is flushed as it happens, not when the handler returns.
func TestEventsFlushLive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	rec := h.do("POST", "/v1/jobs", `{"tool":"shell_exec"}`)
	id := decodeJob(t, rec.Body.String()).ID

	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/jobs/"+id+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "event: queued\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	h.fake.Start(id) // the queued event arrived before the job moved on
	for {
		line, err = rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "event: started\n" {
			break
		}
	}
	h.fake.Finish(id, okResult(""))
	rest := new(strings.Builder)
	if _, err := rd.WriteTo(rest); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rest.String(), "event: finished") {
		t.Fatalf("rest %q", rest)
	}
}
