package job

import (
	"bytes"
	"testing"
)

// FuzzDecodeHookAnswer: a hook's answer is untrusted; decoding never
// panics and rewritten arguments are always an object.
func FuzzDecodeHookAnswer(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"action":"deny","reason":"no"}`, `{"action":"allow","arguments":{"a":1}}`,
		`{"content":"x"}`, `{"arguments":[1]}`, `{"x":1}`, `{} {}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decodeHookAnswer(data)
		if err == nil && len(a.Arguments) > 0 && string(a.Arguments) != "null" && bytes.TrimSpace(a.Arguments)[0] != '{' {
			t.Fatalf("arguments %s accepted", a.Arguments)
		}
	})
}
