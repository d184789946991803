package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Bounds on request fields.
const (
	maxToolNameLen       = 256
	maxCallIDLen         = 256
	maxIdempotencyKeyLen = 255
)

// submitBody is the JSON body of POST /v1/jobs. Either Tool (with optional
// Arguments and CallID) or Call (a raw OpenAI, Anthropic or MCP tool call)
// is set.
type submitBody struct {
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	CallID         string          `json:"call_id"`
	Call           json.RawMessage `json:"call"`
	IdempotencyKey string          `json:"idempotency_key"`
	Limits         *limitsBody     `json:"limits"`
	SessionID      string          `json:"session_id"`
	CallbackURL    string          `json:"callback_url"`
	// Tags and Metadata label the job (bounded by labels.*).
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
}

// limitsBody are the per-request limits: any value up to the operator's
// ceilings (the job service refuses higher values with 400), the defaults
// for those left out.
type limitsBody struct {
	MemoryBytes   int64 `json:"memory_bytes,omitempty"`
	PIDs          int64 `json:"pids,omitempty"`
	CPUMillis     int64 `json:"cpu_millis,omitempty"`
	TimeoutMS     int64 `json:"timeout_ms,omitempty"`
	OutputBytes   int64 `json:"output_bytes,omitempty"`
	NoFile        int64 `json:"nofile,omitempty"`
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	DiskBytes     int64 `json:"disk_bytes,omitempty"`
	DiskInodes    int64 `json:"disk_inodes,omitempty"`
}

func (l limitsBody) toRunner() (runner.Limits, error) {
	fields := []struct {
		name string
		v    int64
	}{
		{"memory_bytes", l.MemoryBytes}, {"pids", l.PIDs}, {"cpu_millis", l.CPUMillis},
		{"timeout_ms", l.TimeoutMS}, {"output_bytes", l.OutputBytes},
		{"nofile", l.NoFile}, {"file_size_bytes", l.FileSizeBytes},
		{"disk_bytes", l.DiskBytes}, {"disk_inodes", l.DiskInodes},
	}
	for _, f := range fields {
		if f.v < 0 {
			return runner.Limits{}, badRequest(fmt.Sprintf("limits.%s must not be negative, got %d", f.name, f.v))
		}
	}
	if l.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		return runner.Limits{}, badRequest(fmt.Sprintf("limits.timeout_ms is too large: %d", l.TimeoutMS))
	}
	return runner.Limits{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		Timeout:     time.Duration(l.TimeoutMS) * time.Millisecond,
		OutputBytes: l.OutputBytes, NoFile: l.NoFile, FileSize: l.FileSizeBytes,
		DiskBytes: l.DiskBytes, DiskInodes: l.DiskInodes,
	}, nil
}

func limitsView(l runner.Limits) limitsBody {
	return limitsBody{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		TimeoutMS: l.Timeout.Milliseconds(), OutputBytes: l.OutputBytes,
		NoFile: l.NoFile, FileSizeBytes: l.FileSize,
		DiskBytes: l.DiskBytes, DiskInodes: l.DiskInodes,
	}
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data. Errors are *Error (400) naming the offset or
// the field.
func decodeStrict(data []byte, v any) error {
	if err := refuseNulls(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(fmt.Sprintf("unexpected data after the JSON value at offset %d", dec.InputOffset()))
	}
	return nil
}

// freeForm are members whose values are the caller's own JSON (a tool's
// arguments, a provider's raw call): null may be a value there.
var freeForm = map[string]bool{"arguments": true, "call": true}

// refuseNulls refuses a body that is null or gives null for a member: the
// document types every member, and null is none of its types (leave the
// member out instead). Invalid JSON is left to the decoder's message.
func refuseNulls(data []byte) error {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	if v == nil {
		return badRequest("the request body is null; expected a JSON object")
	}
	if p := nullMember(v, ""); p != "" {
		return badRequest(fmt.Sprintf("%s is null; leave it out instead", p))
	}
	return nil
}

func nullMember(v any, at string) string {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if freeForm[k] && at == "" {
				continue
			}
			if v[k] == nil {
				return fmt.Sprintf("%q", strings.TrimPrefix(at+"."+k, "."))
			}
			if p := nullMember(v[k], at+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range v {
			if e == nil {
				return fmt.Sprintf("%q", fmt.Sprintf("%s[%d]", strings.TrimPrefix(at, "."), i))
			}
			if p := nullMember(e, fmt.Sprintf("%s[%d]", at, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("the request body is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the request body ends in the middle of a JSON value")
	case errors.As(err, &syn):
		return badRequest(fmt.Sprintf("invalid JSON at offset %d: %s", syn.Offset, syn.Error()))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badRequest(fmt.Sprintf("expected a JSON object, got %s", typ.Value))
		}
		return badRequest(fmt.Sprintf("field %q: expected %s, got %s", field, jsonTypeName(typ.Type.Kind().String()), typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return badRequest("invalid JSON: " + err.Error())
	}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	default:
		return kind
	}
}

// decodeSubmit turns a POST /v1/jobs body (and the Idempotency-Key header)
// into a SubmitRequest. Every failure is an *Error with a 4xx status; it
// never panics (FuzzDecodeSubmit).
func decodeSubmit(data []byte, headerKey string) (job.SubmitRequest, error) {
	var b submitBody
	if err := decodeStrict(data, &b); err != nil {
		return job.SubmitRequest{}, err
	}
	var req job.SubmitRequest
	switch {
	case len(b.Call) > 0 && !isNull(b.Call):
		if b.Tool != "" || len(b.Arguments) > 0 || b.CallID != "" {
			return req, badRequest(`"call" excludes "tool", "arguments" and "call_id"`)
		}
		c, err := tools.ParseCall(b.Call)
		if err != nil {
			return req, callError(err)
		}
		req.Call = c
	case b.Tool == "":
		return req, badRequest(`missing "tool" (or "call")`)
	default:
		req.Call = tools.Call{ID: b.CallID, Name: b.Tool, Arguments: b.Arguments}
	}
	if err := checkCall(req.Call); err != nil {
		return req, err
	}

	key := b.IdempotencyKey
	if headerKey != "" {
		if key != "" && key != headerKey {
			return req, badRequest("the Idempotency-Key header and idempotency_key differ")
		}
		key = headerKey
	}
	if len(key) > maxIdempotencyKeyLen || !printable(key) {
		return req, badRequest(fmt.Sprintf("idempotency_key must be printable and at most %d bytes", maxIdempotencyKeyLen))
	}
	req.IdempotencyKey = key

	if b.Limits != nil {
		l, err := b.Limits.toRunner()
		if err != nil {
			return req, err
		}
		req.Limits = l
	}
	if len(b.SessionID) > 64 || !printable(b.SessionID) {
		return req, badRequest("session_id must be printable and at most 64 bytes")
	}
	req.SessionID = b.SessionID
	if len(b.CallbackURL) > 2048 || !printable(b.CallbackURL) {
		return req, badRequest("callback_url must be printable and at most 2048 bytes")
	}
	req.CallbackURL = b.CallbackURL
	req.Tags, req.Metadata = b.Tags, b.Metadata
	return req, nil
}

// checkCall bounds the name and ID and checks the arguments' shape: an
// object, a string (holding an object, repaired and validated by the job
// service) or absent.
func checkCall(c tools.Call) error {
	switch {
	case c.Name == "":
		return badRequest("the tool name is empty")
	case len(c.Name) > maxToolNameLen || !printable(c.Name):
		return badRequest(fmt.Sprintf("the tool name must be printable and at most %d bytes", maxToolNameLen))
	case len(c.ID) > maxCallIDLen || !printable(c.ID):
		return badRequest(fmt.Sprintf("call_id must be printable and at most %d bytes", maxCallIDLen))
	}
	args := bytes.TrimSpace(c.Arguments)
	if len(args) == 0 || isNull(args) {
		return nil
	}
	if args[0] != '{' && args[0] != '"' {
		return badRequest(`"arguments" must be a JSON object or a string holding one`)
	}
	return nil
}

// callError turns a tools.ParseCall error into a 400 listing the problems.
func callError(err error) error {
	e := badRequest(`"call": ` + err.Error())
	var verr *tools.ValidationError
	if errors.As(err, &verr) {
		e.Details = verr.Problems
	}
	return e
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// parseLabelFilter reads a list's ?tag= (repeated: every one) and
// ?metadata.KEY=VALUE filters. Bounds are the job service's (labels.*).
func parseLabelFilter(q url.Values) (job.LabelFilter, error) {
	var f job.LabelFilter
	for _, t := range q["tag"] {
		if t == "" {
			return f, badRequest("tag must not be empty")
		}
		f.Tags = append(f.Tags, t)
	}
	for k, vs := range q {
		name, ok := strings.CutPrefix(k, "metadata.")
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return f, badRequest(fmt.Sprintf("%s is given %d times; a metadata key has one value", k, len(vs)))
		}
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[name] = vs[0]
	}
	return f, nil
}
