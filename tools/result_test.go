package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

type named string

func (n named) String() string { return "name:" + string(n) }

func TestNormalize(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
	passthrough := Result{OK: true, Content: "x", Usage: Usage{WallMS: 5}}
	tests := []struct {
		name string
		v    any
		err  error
		want Result
	}{
		{"nil", nil, nil, Result{OK: true}},
		{"string", "hello", nil, Result{OK: true, Content: "hello"}},
		{"utf8 bytes", []byte("héllo"), nil, Result{OK: true, Content: "héllo"}},
		{"raw json", json.RawMessage(`{"a":1}`), nil, Result{OK: true, Content: `{"a":1}`}},
		{"result", passthrough, nil, passthrough},
		{"result pointer", &passthrough, nil, passthrough},
		{"nil result pointer", (*Result)(nil), nil, Result{OK: true}},
		{"failed result kept", Result{OK: false, Error: "no such file"}, nil, Result{OK: false, Error: "no such file"}},
		{"error value", errors.New("boom"), nil, Result{OK: false, Error: "boom"}},
		{"error", "partial", errors.New("boom"), Result{OK: false, Content: "partial", Error: "boom"}},
		{"error and result error", Result{OK: true, Error: "detail"}, errors.New("boom"), Result{OK: false, Error: "boom: detail"}},
		{"map", map[string]any{"b": 1, "a": []int{1}}, nil, Result{OK: true, Content: `{"a":[1],"b":1}`}},
		{"struct", point{1, 2}, nil, Result{OK: true, Content: `{"x":1,"y":2}`}},
		{"number", 42, nil, Result{OK: true, Content: `42`}},
		{"stringer", named("n"), nil, Result{OK: true, Content: "name:n"}},
		{"unencodable", make(chan int), nil, Result{OK: false, Error: "tool result cannot be encoded as JSON: json: unsupported type: chan int"}},
		{"binary", png, nil, Result{OK: true,
			Content:   fmt.Sprintf(`[binary output: %d bytes of image/png, attached as artifact "output"]`, len(png)),
			Artifacts: []Artifact{{Name: "output", MimeType: "image/png", Size: int64(len(png)), Data: png}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Normalize(tt.v, tt.err)
			if mustJSON(t, got) != mustJSON(t, tt.want) {
				t.Errorf("Normalize = %s\nwant        %s", mustJSON(t, got), mustJSON(t, tt.want))
			}
		})
	}
}

func TestFromProcess(t *testing.T) {
	t.Parallel()
	effects := []Effect{EffectExec}
	tests := []struct {
		name      string
		info      ProcessInfo
		wall      time.Duration
		ok        bool
		content   string
		errMsg    string
		truncated bool
	}{
		{"success", ProcessInfo{Stdout: "hi\n"}, time.Second, true, "hi\n", "", false},
		{"success with stderr", ProcessInfo{Stdout: "out", Stderr: "warn\n"}, time.Second, true, "out\n\n[stderr]\nwarn\n", "", false},
		{"only stderr", ProcessInfo{ExitCode: 2, Stderr: "ls: nope\n"}, time.Second, false, "[stderr]\nls: nope\n", "process exited with code 2", false},
		{"exit 1", ProcessInfo{ExitCode: 1, Stdout: "x\n"}, 0, false, "x\n", "process exited with code 1", false},
		{"exit 137", ProcessInfo{ExitCode: 137}, 0, false, "", "process exited with code 137 (usually killed by signal 9, SIGKILL)", false},
		{"oom with limit", ProcessInfo{ExitCode: 137, OOMKilled: true, MemoryLimit: 256 << 20}, time.Second, false, "", "killed: out of memory (limit 256 MiB)", false},
		{"oom fractional limit", ProcessInfo{OOMKilled: true, MemoryLimit: 1536 << 20}, time.Second, false, "", "killed: out of memory (limit 1.5 GiB)", false},
		{"oom no limit", ProcessInfo{ExitCode: 137, OOMKilled: true}, time.Second, false, "", "killed: out of memory", false},
		{"fork loop", ProcessInfo{ExitCode: 137, Signal: "SIGKILL", ForkLoop: true, PIDsLimit: 256}, time.Second, false, "", "killed: kept forking at its process limit (256): a fork loop", false},
		{"fork loop no limit", ProcessInfo{ExitCode: 137, Signal: "SIGKILL", ForkLoop: true}, time.Second, false, "", "killed: kept forking at its process limit: a fork loop", false},
		{"timeout", ProcessInfo{ExitCode: -1, TimedOut: true, Stdout: "partial"}, 30*time.Second + 20*time.Millisecond, false, "partial", "timed out after 30s", false},
		{"timeout short", ProcessInfo{TimedOut: true}, 250 * time.Millisecond, false, "", "timed out after 250ms", false},
		{"signal", ProcessInfo{ExitCode: -1, Signal: "SIGSEGV"}, 0, false, "", "killed by signal SIGSEGV", false},
		{"truncated", ProcessInfo{Stdout: "aaa[... output truncated ...]", OutputTruncated: true}, 0, true, "aaa[... output truncated ...]", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := FromProcess(tt.info, effects, tt.wall)
			if r.OK != tt.ok || r.Content != tt.content || r.Error != tt.errMsg || r.Truncated != tt.truncated {
				t.Errorf("FromProcess = ok %v content %q error %q truncated %v", r.OK, r.Content, r.Error, r.Truncated)
			}
			if r.Usage.WallMS != tt.wall.Milliseconds() || len(r.Effects) != 1 || r.Process == nil || r.Process.ExitCode != tt.info.ExitCode {
				t.Errorf("usage/effects/process = %+v %v %+v", r.Usage, r.Effects, r.Process)
			}
		})
	}
	t.Run("effects copied", func(t *testing.T) {
		t.Parallel()
		in := []Effect{EffectExec}
		r := FromProcess(ProcessInfo{}, in, 0)
		in[0] = EffectHTTP
		if r.Effects[0] != EffectExec {
			t.Error("Effects aliases the caller's slice")
		}
	})
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{512: "512 B", 1024: "1 KiB", 256 << 20: "256 MiB", 3 << 30: "3 GiB", 1<<20 + 1<<19: "1.5 MiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if !strings.HasSuffix(formatBytes(1<<62), "EiB") {
		t.Error(formatBytes(1 << 62))
	}
}
