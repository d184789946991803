package api

import (
	"errors"
	"testing"
)

func FuzzDecodeSubmit(f *testing.F) {
	for _, seed := range []string{
		`{"tool":"python_repl","arguments":{"code":"print(1)"}}`,
		`{"tool":"bash","arguments":"{\"command\":\"ls\"}","call_id":"c","idempotency_key":"k"}`,
		`{"tool":"x","limits":{"memory_bytes":1,"pids":2,"cpu_millis":3,"timeout_ms":4,"output_bytes":5}}`,
		`{"call":{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}}`,
		`{"call":{"type":"tool_use","id":"t","name":"f","input":{}}}`,
		`{"call":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f"}}}`,
		`{"call":{"method":"tools/call","params":{"method":"tools/call","params":{}}}}`,
		`{"tool":"x","limits":{"timeout_ms":9223372036854775807}}`,
		`{"tool":"x"} 1`, `[]`, `null`, ``, `{"tool":"\u0000"}`,
	} {
		f.Add([]byte(seed), "")
	}
	f.Add([]byte(`{"tool":"x"}`), "key")
	f.Fuzz(func(t *testing.T, data []byte, header string) {
		req, err := decodeSubmit(data, header)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("decodeSubmit error %v is not a 4xx *Error", err)
			}
			return
		}
		if req.Call.Name == "" {
			t.Fatal("accepted a request without a tool name")
		}
		if req.Limits.MemoryBytes < 0 || req.Limits.PIDs < 0 || req.Limits.Timeout < 0 {
			t.Fatalf("accepted negative limits %+v", req.Limits)
		}
	})
}
