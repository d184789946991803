package agent

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Message types. Requests go client → agent; output, result and error go
// agent → client and carry the ID of the request they answer.
const (
	typePing      = "ping"
	typeExec      = "exec"
	typePrestart  = "prestart"
	typeREPLWarm  = "repl_warm"
	typeCancel    = "cancel"
	typeREPL      = "repl"
	typeReadFile  = "read_file"
	typeWriteFile = "write_file"
	typeListDir   = "list_dir"
	typeListTree  = "list_tree"
	typeStat      = "stat"
	typeRemove    = "remove"
	typeShutdown  = "shutdown"
	// typeStdin carries a chunk of a long-lived exec's stdin (Target is
	// the exec; EOF closes it). It is not a request: it has no ID and no
	// answer.
	typeStdin = "stdin"
	// typeKill kills an exec's process group (Target) as its timeout
	// would, and the exec answers its result with Killed set (a cancel
	// answers an error instead). Like stdin, it has no ID and no answer.
	typeKill = "kill"

	typeOutput = "output" // streamed chunk of an exec or repl
	typeResult = "result" // final answer to a request
	typeError  = "error"  // final answer: the request failed
)

// frame is the one JSON body every message uses; fields not relevant to a
// type are omitted.
type frame struct {
	ID    uint64 `json:"id"`
	Type  string `json:"type"`
	Error string `json:"error,omitempty"`

	Target uint64 `json:"target,omitempty"` // cancel: the request to cancel; stdin, kill: the exec
	EOF    bool   `json:"eof,omitempty"`    // stdin: no more input
	Stream string `json:"stream,omitempty"` // output: "stdout" | "stderr"
	Data   []byte `json:"data,omitempty"`   // output chunk, file content

	Exec       *ExecRequest `json:"exec,omitempty"`
	ExecResult *ExecResult  `json:"exec_result,omitempty"`
	REPL       *REPLRequest `json:"repl,omitempty"`
	REPLResult *REPLResult  `json:"repl_result,omitempty"`

	Path      string     `json:"path,omitempty"`
	MaxBytes  int64      `json:"max_bytes,omitempty"`
	Mode      uint32     `json:"mode,omitempty"`
	Recursive bool       `json:"recursive,omitempty"`
	Files     []FileInfo `json:"files,omitempty"`
	Info      *FileInfo  `json:"info,omitempty"`
}

// ErrFrameTooLarge is returned for a frame whose length exceeds MaxFrameSize.
// It is a protocol violation (errors.Is(err, ErrProtocol)).
var ErrFrameTooLarge = fmt.Errorf("%w: frame too large", ErrProtocol)

// readFrame reads one length-prefixed JSON frame. Any error means the
// stream is unusable and the connection must be closed; malformed input
// (as opposed to a closed or broken connection) wraps ErrProtocol.
func readFrame(r io.Reader, buf []byte) (frame, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return frame{}, buf, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if n == 0 {
		return frame{}, buf, fmt.Errorf("%w: empty frame", ErrProtocol)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, buf, err
	}
	var f frame
	if err := json.Unmarshal(buf, &f); err != nil {
		return frame{}, buf, fmt.Errorf("%w: bad frame: %w", ErrProtocol, err)
	}
	if f.Type == "" {
		return frame{}, buf, fmt.Errorf("%w: frame without type", ErrProtocol)
	}
	return f, buf, nil
}

// encodeFrame returns header+body ready for a single Write.
func encodeFrame(f *frame) ([]byte, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(body))
	}
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out, nil
}
