package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestRelaySSE(t *testing.T) {
	var out bytes.Buffer
	r := &relay{out: &out}
	body := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
		": comment\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n" + "data: \"result\":{\"protocolVersion\":\"2025-11-25\"}}\n\n"
	if err := r.relaySSE(strings.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	want := `{"jsonrpc":"2.0","method":"notifications/progress"}` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}` + "\n"
	if out.String() != want {
		t.Fatalf("relayed %q, want %q", out.String(), want)
	}
	if r.version != "2025-11-25" {
		t.Fatalf("protocol version %q", r.version)
	}
}

func TestIsRequest(t *testing.T) {
	for msg, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`:       true,
		`{"jsonrpc":"2.0","id":"a","method":"ping"}`:           true,
		`{"jsonrpc":"2.0","method":"notifications/cancelled"}`: false,
		`{"jsonrpc":"2.0","id":null,"method":"x"}`:             false,
		`{"jsonrpc":"2.0","id":3,"result":{}}`:                 false,
		`not json`:                                             false,
	} {
		if got := isRequest([]byte(msg)); got != want {
			t.Errorf("isRequest(%s) = %v", msg, got)
		}
	}
}

// FuzzRelaySSE: any stream from the server relays without a panic, one
// message per line.
func FuzzRelaySSE(f *testing.F) {
	f.Add("data: {}\n\n")
	f.Add("data: a\ndata: b\n\nevent: x\n")
	f.Fuzz(func(t *testing.T, body string) {
		var out bytes.Buffer
		r := &relay{out: &out}
		_ = r.relaySSE(strings.NewReader(body))
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if out.Len() > 0 && !json.Valid([]byte(line)) {
				t.Fatalf("relayed line %q is not one JSON message", line)
			}
		}
	})
}

func TestAnswersRequest(t *testing.T) {
	req := `{"jsonrpc":"2.0","id":7,"method":"server/discover"}`
	for body, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"unsupported"}}`: true,
		`{"jsonrpc":"2.0","id": 7 ,"error":{"code":1}}`:                            true,
		`{"jsonrpc":"2.0","id":8,"error":{"code":1}}`:                              false,
		`{"jsonrpc":"2.0","id":7,"result":{}}`:                                     false,
		`{"jsonrpc":"2.0","id":null,"error":{"code":1}}`:                           false,
		`{"jsonrpc":"2.0","id":{},"error":{"code":1}}`:                             false,
		`Bad Request`: false,
	} {
		if got := answersRequest([]byte(body), []byte(req)); got != want {
			t.Errorf("answersRequest(%s) = %v", body, got)
		}
	}
}
