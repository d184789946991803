package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func pyFrame(body string) []byte {
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	return b
}

// TestFitREPLResult: output within its limits that JSON inflates (control
// characters take six bytes each) and artifacts at their limit still make
// a result that fits one frame.
func TestFitREPLResult(t *testing.T) {
	t.Parallel()
	ctl := strings.Repeat("\x01", MaxOutputLimit)
	res := REPLResult{Stdout: ctl, Stderr: ctl, Value: ctl[:maxREPLText], Error: ctl[:maxREPLText],
		Artifacts: []Artifact{{Name: "a.png", MimeType: "image/png", Data: bytes.Repeat([]byte{1}, maxArtifactBytes)}}}
	if n := jsonLen(res.Stdout); n <= MaxFrameSize { // exact for control characters
		t.Fatalf("the test's stdout alone should not fit a frame: %d bytes of JSON", n)
	}
	fitREPLResult(&res)
	if _, err := encodeFrame(&frame{ID: 1, Type: typeResult, REPLResult: &res}); err != nil {
		t.Fatalf("after fitREPLResult: %v", err)
	}
	if res.Artifacts != nil || !strings.Contains(res.Stderr, "artifacts dropped") || !strings.Contains(res.Stdout, "truncated") || res.Value == "" {
		t.Errorf("fitted: %d artifacts, stdout %d, stderr %d, value %d bytes", len(res.Artifacts), len(res.Stdout), len(res.Stderr), len(res.Value))
	}
	small := REPLResult{OK: true, Stdout: "hi\n", Value: "1"}
	fitREPLResult(&small)
	if small.Stdout != "hi\n" || small.Value != "1" {
		t.Errorf("a small result changed: %+v", small)
	}
}

// TestREPLHostileInterpreter: the interpreter is the code; what it writes
// to the agent's pipe is bounded, and a broken stream costs the
// interpreter, never the agent.
func TestREPLHostileInterpreter(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	// A result forged for this very cell (its id read from repl.py's
	// frame) with too many artifacts and a value of control characters
	// (six JSON bytes each) past the text limit.
	res := repl(t, c, `import os, json, sys
f = sys._getframe()
while "req" not in f.f_locals:
    f = f.f_back
b = json.dumps({"t": "r", "id": f.f_locals["req"]["id"], "ok": True, "value": "\x01" * 1_200_000,
    "artifacts": [{"name": "a", "mime_type": "b", "data": ""}] * 1000 + [{"name": "n" * 300, "mime_type": "x", "data": ""}]}).encode()
os.write(4, len(b).to_bytes(4, "big") + b)
import time; time.sleep(1)`, 0)
	if len(res.Artifacts) != maxArtifacts || len(res.Value) > maxREPLText+100 || !strings.Contains(res.Stderr, "artifacts past the first") {
		t.Errorf("forged result: %d artifacts, value %d bytes, stderr %q", len(res.Artifacts), len(res.Value), res.Stderr)
	}
	// A length past maxPyMessage kills the interpreter.
	res = repl(t, c, `import os; os.write(4, (64 << 20).to_bytes(4, "big")); import time; time.sleep(5)`, 0)
	if res.OK || !strings.Contains(res.Error, "interpreter exited") {
		t.Errorf("oversized message: %+v", res)
	}
	// Garbage too.
	res = repl(t, c, `x = 1`, 0)
	if !res.Restarted || !res.OK {
		t.Errorf("after the kill: %+v", res)
	}
	res = repl(t, c, `import os; os.write(4, b"\x00\x00\x00\x05{{{{{"); import time; time.sleep(5)`, 0)
	if res.OK || !strings.Contains(res.Error, "interpreter exited") {
		t.Errorf("garbage message: %+v", res)
	}
	// A cell takes only a result with its own id: one for an earlier
	// cell (a late answer, or forged by the code's own thread) never
	// shifts into a later cell. (The code can forge its current cell's:
	// it is the interpreter.)
	repl(t, c, `import os, json, threading, time
def forge():
    for i in range(100):
        b = json.dumps({"t": "r", "id": 1, "ok": True, "value": "'forged'"}).encode()
        os.write(4, len(b).to_bytes(4, "big") + b)
        time.sleep(0.01)
threading.Thread(target=forge).start()`, 0)
	for range 3 {
		if res = repl(t, c, `import time; time.sleep(0.2); "real"`, 0); res.Value != "'real'" {
			t.Errorf("a forged result was taken: %+v", res)
		}
	}
	if err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("agent after the attacks: %v", err)
	}
}

// FuzzREPLMessages feeds arbitrary bytes as the interpreter's message
// stream: no panic, and every result the agent builds from it is within
// its bounds and fits one frame.
func FuzzREPLMessages(f *testing.F) {
	f.Add(pyFrame(`{"t":"o","s":"stdout","d":"hi\n"}`))
	f.Add(append(pyFrame(`{"t":"o","s":"stderr","d":"\u0001"}`), pyFrame(`{"t":"r","ok":true,"value":"1","artifacts":[{"name":"f.png","mime_type":"image/png","data":"aGk="}]}`)...))
	f.Add(pyFrame(`{"t":"r","ok":false,"error":"Traceback","interrupted":true}`))
	f.Add(pyFrame(`{"t":"r","artifacts":[{},{},{}]}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(pyFrame(`[1,2]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(bytes.NewReader(in))
		out, errb := newCapBuf(MaxOutputLimit), newCapBuf(MaxOutputLimit)
		for {
			m, err := readPyMsg(br)
			if err != nil {
				return
			}
			switch m.T {
			case "o":
				if m.S == "stdout" {
					out.Write([]byte(m.D))
				} else if m.S == "stderr" {
					errb.Write([]byte(m.D))
				}
			case "r":
				var res REPLResult
				m.result(&res, func(s string) { errb.Write([]byte(s)) })
				o, _ := out.Bytes()
				e, _ := errb.Bytes()
				res.Stdout, res.Stderr = string(o), string(e)
				fitREPLResult(&res)
				if len(res.Artifacts) > maxArtifacts || len(res.Value) > maxREPLText+64 || len(res.Error) > maxREPLText+64 {
					t.Fatalf("result past its bounds: %d artifacts, value %d, error %d", len(res.Artifacts), len(res.Value), len(res.Error))
				}
				var total int
				for _, a := range res.Artifacts {
					total += len(a.Data)
				}
				if total > maxArtifactBytes {
					t.Fatalf("artifacts of %d bytes", total)
				}
				b, err := encodeFrame(&frame{ID: 1, Type: typeResult, REPLResult: &res})
				if err != nil {
					t.Fatalf("result does not encode: %v", err)
				}
				var back frame
				if err := json.Unmarshal(b[4:], &back); err != nil {
					t.Fatalf("result does not decode: %v", err)
				}
			}
		}
	})
}

// FuzzJSONLen: jsonLen never undercounts what encoding/json writes.
func FuzzJSONLen(f *testing.F) {
	for _, s := range []string{"", "plain", "\x01\n\t\"\\<>&", "\u2028\u2029", "\xff\xfe", "日本語"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if n := jsonLen(s); n < len(b) {
			t.Fatalf("jsonLen(%q) = %d, encoding/json writes %d bytes", s, n, len(b))
		}
	})
}
