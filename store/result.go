package store

import (
	"encoding/json"
	"strings"

	"github.com/sandboxd/sandboxd/tools"
)

// A sandboxed tool's Content is its stdout and stderr joined
// (tools.FromProcess), and Process repeats both streams: stored as is,
// every job row held its output twice (a 1 MiB-per-stream job took
// 4.1 MiB). The row keeps Content once and the lengths of the two streams
// it starts and ends with; reading rebuilds Process.Stdout and
// Process.Stderr exactly.

// resultRow is a tools.Result as stored.
type resultRow struct {
	*tools.Result
	// Split is [len(stdout), len(stderr)] when Process's streams were
	// dropped because Content starts with stdout and ends with stderr.
	Split *[2]int `json:"process_output_in_content,omitempty"`
}

func encodeResult(r *tools.Result) ([]byte, error) {
	row := resultRow{Result: r}
	if p := r.Process; p != nil && (p.Stdout != "" || p.Stderr != "") &&
		len(p.Stdout)+len(p.Stderr) <= len(r.Content) &&
		strings.HasPrefix(r.Content, p.Stdout) && strings.HasSuffix(r.Content, p.Stderr) {
		c := *r
		pc := *p
		pc.Stdout, pc.Stderr = "", ""
		c.Process = &pc
		row = resultRow{Result: &c, Split: &[2]int{len(p.Stdout), len(p.Stderr)}}
	}
	return json.Marshal(row)
}

func decodeResult(b []byte) (*tools.Result, error) {
	row := resultRow{Result: new(tools.Result)}
	if err := json.Unmarshal(b, &row); err != nil {
		return nil, err
	}
	r := row.Result
	if sp := row.Split; sp != nil && r.Process != nil &&
		sp[0] >= 0 && sp[1] >= 0 && sp[0]+sp[1] <= len(r.Content) {
		r.Process.Stdout = r.Content[:sp[0]]
		r.Process.Stderr = r.Content[len(r.Content)-sp[1]:]
	}
	return r, nil
}
