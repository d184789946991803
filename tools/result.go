package tools

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// binaryArtifactName names the artifact Normalize makes of binary output.
const binaryArtifactName = "output"

// Normalize turns whatever an in-process tool returned into a Result:
//
//   - Result or *Result: passed through unchanged (nil *Result is an empty
//     successful result);
//   - string, fmt.Stringer: the content;
//   - json.RawMessage: the content, as is;
//   - []byte: the content when it is UTF-8, else an artifact (the content
//     then says so, since the model never sees artifacts);
//   - an error value: ok=false with its text;
//   - nil: ok with empty content;
//   - anything else (maps, structs, slices, numbers): JSON content.
//
// A non-nil err makes the result fail (ok=false) with err's text as Error,
// keeping whatever content v had.
func Normalize(v any, err error) Result {
	r := normalizeValue(v)
	if err != nil {
		r.OK = false
		if r.Error == "" {
			r.Error = err.Error()
		} else if msg := err.Error(); !strings.Contains(r.Error, msg) {
			r.Error = msg + ": " + r.Error
		}
	}
	return r
}

func normalizeValue(v any) Result {
	switch v := v.(type) {
	case nil:
		return Result{OK: true}
	case Result:
		return v
	case *Result:
		if v == nil {
			return Result{OK: true}
		}
		return *v
	case string:
		return Result{OK: true, Content: v}
	case json.RawMessage:
		return Result{OK: true, Content: string(v)}
	case []byte:
		return bytesResult(v)
	case error:
		return Result{OK: false, Error: v.Error()}
	case fmt.Stringer:
		return Result{OK: true, Content: v.String()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Result{OK: false, Error: "tool result cannot be encoded as JSON: " + err.Error()}
	}
	return Result{OK: true, Content: string(b)}
}

func bytesResult(b []byte) Result {
	if utf8.Valid(b) {
		return Result{OK: true, Content: string(b)}
	}
	mime := http.DetectContentType(b)
	return Result{
		OK:      true,
		Content: fmt.Sprintf("[binary output: %d bytes of %s, attached as artifact %q]", len(b), mime, binaryArtifactName),
		Artifacts: []Artifact{{
			Name:     binaryArtifactName,
			MimeType: mime,
			Size:     int64(len(b)),
			Data:     slices.Clone(b),
		}},
	}
}

// StderrLabel separates stderr from stdout in a sandboxed tool's content.
const StderrLabel = "[stderr]"

// FromProcess turns how a sandboxed process ended into a Result. It is ok
// iff the process exited 0 without timing out, running out of memory or
// being killed by a signal. Content is stdout, then stderr under StderrLabel
// when stderr is not empty. Error says what went wrong in words ("process
// exited with code 2", "killed: out of memory (limit 256 MiB)", "timed out
// after 30s"). Truncation is flagged (Truncated); the runner has already put
// its marker in the text. wall is the call's wall time.
func FromProcess(info ProcessInfo, effects []Effect, wall time.Duration) Result {
	r := Result{
		Content:   processContent(info.Stdout, info.Stderr),
		Usage:     Usage{WallMS: wall.Milliseconds()},
		Effects:   slices.Clone(effects),
		Truncated: info.OutputTruncated,
	}
	p := info
	r.Process = &p
	r.Error = processError(info, wall)
	r.OK = r.Error == ""
	return r
}

func processContent(stdout, stderr string) string {
	if stderr == "" {
		return stdout
	}
	var b strings.Builder
	b.WriteString(stdout)
	if stdout != "" {
		if !strings.HasSuffix(stdout, "\n") {
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	b.WriteString(StderrLabel)
	b.WriteByte('\n')
	b.WriteString(stderr)
	return b.String()
}

// processError explains a failed process, "" for success. The most
// specific cause wins: out of memory, timeout, signal, exit code.
func processError(info ProcessInfo, wall time.Duration) string {
	switch {
	case info.OOMKilled:
		if info.MemoryLimit > 0 {
			return "killed: out of memory (limit " + formatBytes(info.MemoryLimit) + ")"
		}
		return "killed: out of memory"
	case info.ForkLoop:
		if info.PIDsLimit > 0 {
			return "killed: kept forking at its process limit (" + strconv.FormatInt(info.PIDsLimit, 10) + "): a fork loop"
		}
		return "killed: kept forking at its process limit: a fork loop"
	case info.TimedOut:
		return "timed out after " + formatDuration(wall)
	case info.Signal != "":
		return "killed by signal " + info.Signal
	case info.ExitCode != 0:
		msg := "process exited with code " + strconv.Itoa(info.ExitCode)
		if sig := info.ExitCode - 128; sig > 0 && sig < 65 {
			msg += fmt.Sprintf(" (usually killed by signal %d%s)", sig, signalName(sig))
		}
		return msg
	}
	return ""
}

func signalName(n int) string {
	switch n {
	case 9:
		return ", SIGKILL"
	case 15:
		return ", SIGTERM"
	case 6:
		return ", SIGABRT"
	case 11:
		return ", SIGSEGV"
	case 2:
		return ", SIGINT"
	}
	return ""
}

// formatBytes renders n in binary units: "256 MiB", "1.5 GiB", "512 B".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f := float64(n) / unit
	i := 0
	for f >= unit && i < len(units)-1 {
		f /= unit
		i++
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0") + " " + units[i]
}

// formatDuration renders a wall time the way a person would say a limit:
// whole seconds from 1s up, milliseconds below.
func formatDuration(d time.Duration) string {
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
