package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The interpreter's messages (fd 4) are untrusted: the interpreter runs
// the code, and the code may write anything to that pipe. Nothing in a
// message is taken at its word: sizes, counts and lengths are bounded
// here, and a result is cut to fit one frame (fitREPLResult).

const (
	// maxREPLText bounds a result's Value and Error (repl.py clips both
	// to 256 Ki characters).
	maxREPLText = 1 << 20
	// maxArtifacts bounds the artifacts of one cell; maxArtifactName and
	// maxArtifactMime their names and MIME types.
	maxArtifacts    = 64
	maxArtifactName = 255
	maxArtifactMime = 127
	// replFrameBudget is what a REPLResult may take of a frame (the rest:
	// id, type, field names).
	replFrameBudget = MaxFrameSize - 4<<10
)

// errPyProtocol marks a message stream that is not the framing repl.py
// speaks (too large, not JSON): the interpreter gets killed.
var errPyProtocol = errors.New("repl: interpreter broke the protocol")

// readPyMsg reads one length-prefixed JSON message. Errors other than
// errPyProtocol are the pipe's (EOF).
func readPyMsg(br *bufio.Reader) (pyMsg, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return pyMsg{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxPyMessage {
		return pyMsg{}, fmt.Errorf("%w: message of %d bytes", errPyProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return pyMsg{}, err
	}
	var m pyMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return pyMsg{}, fmt.Errorf("%w: %v", errPyProtocol, err)
	}
	return m, nil
}

// result copies a result message ("r") into res within the bounds above;
// note reports what was dropped (to the cell's stderr).
func (m *pyMsg) result(res *REPLResult, note func(string)) {
	res.OK = m.OK
	if m.ExitCode > 0 && m.ExitCode <= 255 {
		res.ExitCode = m.ExitCode
	}
	res.Value = clipMarked(m.Value, maxREPLText)
	res.Error = clipMarked(m.Error, maxREPLText)
	var total int
	for i, a := range m.Artifacts {
		if i == maxArtifacts {
			note(fmt.Sprintf("sandboxd: artifacts past the first %d dropped\n", maxArtifacts))
			break
		}
		if total += len(a.Data); total > maxArtifactBytes {
			note("sandboxd: artifacts over the size limit dropped\n")
			break
		}
		if len(a.Name) > maxArtifactName || len(a.MimeType) > maxArtifactMime {
			note("sandboxd: an artifact with an overlong name or MIME type dropped\n")
			continue
		}
		res.Artifacts = append(res.Artifacts, a)
	}
}

// fitREPLResult cuts res until its JSON fits replFrameBudget: JSON may
// take six bytes for one byte of text (control characters) and base64
// four for three, so output within its limits can still overflow a frame.
// Artifacts go first, then the longest of the texts is halved. Sizes are
// jsonLen's upper bounds: nothing is encoded to find out.
func fitREPLResult(res *REPLResult) {
	bound := 6*(len(res.Stdout)+len(res.Stderr)+len(res.Value)+len(res.Error)) + 1024
	for _, a := range res.Artifacts {
		bound += artifactLen(a)
	}
	if bound <= replFrameBudget {
		return // the common case
	}
	const note = "\nsandboxd: artifacts dropped: the result did not fit in one frame\n"
	texts := []*string{&res.Stdout, &res.Stderr, &res.Value, &res.Error}
	size := func() int {
		n := 1024 + jsonLen(note)
		for _, p := range texts {
			n += jsonLen(*p)
		}
		for _, a := range res.Artifacts {
			n += artifactLen(a)
		}
		return n
	}
	dropped := false
	for n := size(); n > replFrameBudget; n = size() {
		if len(res.Artifacts) > 0 {
			res.Artifacts, dropped = nil, true
			continue
		}
		longest := texts[0]
		for _, p := range texts[1:] {
			if len(*p) > len(*longest) {
				longest = p
			}
		}
		*longest = clipMarked(*longest, len(*longest)/2)
	}
	if dropped {
		res.Stderr += note
	}
}

// jsonLen is at least the length of s encoded as a JSON string by
// encoding/json (quotes included): six bytes for a control character,
// an HTML-sensitive character, U+2028/U+2029 or an invalid byte, two for
// an escaped quote, backslash or \n, \r, \t, else the character's bytes.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029', r == '<', r == '>', r == '&':
			n += 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
			n += 2
		case r < 0x20:
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// artifactLen bounds an artifact's JSON: base64 data, escaped name and
// type, field names.
func artifactLen(a Artifact) int {
	return (len(a.Data)+2)/3*4 + jsonLen(a.Name) + jsonLen(a.MimeType) + 64
}

// clipMarked keeps at most max bytes of s, cut at a character boundary,
// and says so.
func clipMarked(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "\n[... sandboxd: truncated ...]\n"
}
