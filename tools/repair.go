package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SyntaxError reports JSON that Repair could not make valid.
type SyntaxError struct {
	Offset int    // byte offset in the input
	Near   string // the input around Offset, on one line
	Reason string // what was expected
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d near `%s`: %s", e.Offset, e.Near, e.Reason)
}

// maxRepairDepth bounds nesting so hostile input cannot exhaust the stack.
const maxRepairDepth = 1000

// maxProseStarts bounds how many '{' Repair tries when JSON is surrounded by
// prose, so the work stays linear in practice.
const maxProseStarts = 8

// Repair returns raw as valid JSON, fixing what models commonly get wrong:
// trailing or missing commas, single-quoted strings, unquoted keys, Python
// literals (True, False, None), comments, raw control characters inside
// strings, and a value wrapped in a markdown fence or surrounded by prose.
//
// Valid JSON is returned unchanged (surrounding space trimmed). Repair is a
// tokenizer that re-emits what it reads: double-quoted strings that are
// valid are copied byte for byte, so the content of a valid string value is
// never changed. Truncated input is not completed (a cut-off command must not
// run): it is an error. Errors are *SyntaxError.
func Repair(raw []byte) (json.RawMessage, error) {
	start := 0
	for start < len(raw) && isSpace(raw[start]) {
		start++
	}
	if start == len(raw) {
		return nil, newSyntaxError(raw, 0, "empty input, expected a JSON object")
	}
	if trimmed := bytes.TrimSpace(raw); json.Valid(trimmed) {
		return bytes.Clone(trimmed), nil
	}

	var best *SyntaxError // the error of the attempt that got furthest
	try := func(from, to int) json.RawMessage {
		p := repairer{src: raw[:to], pos: from}
		out, err := p.run()
		if err == nil {
			return out
		}
		if best == nil || err.Offset > best.Offset {
			best = err
		}
		return nil
	}

	// A markdown fence: ```json\n{...}\n```.
	if i := bytes.Index(raw, []byte("```")); i >= 0 {
		from := i + 3
		if nl := bytes.IndexByte(raw[from:], '\n'); nl >= 0 {
			from += nl + 1
		} else {
			from = len(raw)
		}
		to := len(raw)
		if j := bytes.Index(raw[from:], []byte("```")); j >= 0 {
			to = from + j
		}
		if out := try(from, to); out != nil {
			return out, nil
		}
	}

	// JSON from the first byte: repair it, and do not go looking for
	// another object inside it.
	if startsValue(raw[start:]) {
		if out := try(start, len(raw)); out != nil {
			return out, nil
		}
		return nil, best
	}

	// Prose around an object: try each '{' in turn.
	from := start
	for n := 0; n < maxProseStarts; n++ {
		i := bytes.IndexByte(raw[from:], '{')
		if i < 0 {
			break
		}
		if out := try(from+i, len(raw)); out != nil {
			return out, nil
		}
		from += i + 1
	}
	if best == nil {
		best = newSyntaxError(raw, start, "expected a JSON object")
	}
	return nil, best
}

// startsValue reports whether b (non-empty, no leading space) begins like a
// JSON value rather than prose.
func startsValue(b []byte) bool {
	switch c := b[0]; {
	case c == '{' || c == '[' || c == '"' || c == '\'' || c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'):
		return true
	}
	w := b[:wordEnd(b, 0)]
	_, ok := literal(w)
	return ok
}

func newSyntaxError(src []byte, off int, reason string) *SyntaxError {
	off = min(max(off, 0), len(src))
	from, to := max(0, off-20), min(len(src), off+10)
	for from > 0 && from < len(src) && !utf8.RuneStart(src[from]) {
		from--
	}
	near := strings.ToValidUTF8(string(src[from:to]), "?")
	near = strings.NewReplacer("\n", " ", "\r", " ", "\t", " ", "`", "'").Replace(near)
	return &SyntaxError{Offset: off, Near: near, Reason: reason}
}

// repairer re-emits one lenient JSON value of src[pos:] as strict JSON.
type repairer struct {
	src   []byte
	pos   int
	out   []byte
	depth int
}

func (p *repairer) run() (json.RawMessage, *SyntaxError) {
	p.skipSpace()
	if err := p.value(); err != nil {
		return nil, err
	}
	p.skipSpace()
	// Text after the value is prose ("Let me know if ...") and ignored,
	// unless it holds another object: then which one was meant is unclear.
	if rest := p.src[p.pos:]; bytes.IndexByte(rest, '{') >= 0 {
		return nil, p.errorf(p.pos, "unexpected data after the value")
	}
	if !json.Valid(p.out) { // cannot happen; keep the promise anyway
		return nil, p.errorf(0, "could not repair")
	}
	return p.out, nil
}

func (p *repairer) errorf(off int, reason string) *SyntaxError {
	return newSyntaxError(p.src, off, reason)
}

func (p *repairer) eof() bool { return p.pos >= len(p.src) }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace skips white space and // and /* */ comments.
func (p *repairer) skipSpace() {
	for !p.eof() {
		c := p.src[p.pos]
		switch {
		case isSpace(c):
			p.pos++
		case c == '/' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '/':
			if nl := bytes.IndexByte(p.src[p.pos:], '\n'); nl >= 0 {
				p.pos += nl + 1
			} else {
				p.pos = len(p.src)
			}
		case c == '/' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '*':
			if end := bytes.Index(p.src[p.pos+2:], []byte("*/")); end >= 0 {
				p.pos += end + 4
			} else {
				p.pos = len(p.src)
			}
		default:
			return
		}
	}
}

func (p *repairer) value() *SyntaxError {
	if p.eof() {
		return p.errorf(p.pos, "unexpected end of input, expected a value")
	}
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxRepairDepth {
		return p.errorf(p.pos, "nested too deeply")
	}
	switch p.src[p.pos] {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"', '\'':
		return p.str()
	}
	start := p.pos
	end := wordEnd(p.src, start)
	if end == start {
		return p.errorf(start, "expected a value")
	}
	w := p.src[start:end]
	if lit, ok := literal(w); ok {
		p.out = append(p.out, lit...)
	} else if num, ok := number(w); ok {
		p.out = append(p.out, num...)
	} else {
		return p.errorf(start, "expected a value")
	}
	p.pos = end
	return nil
}

func (p *repairer) object() *SyntaxError {
	open := p.pos
	p.pos++
	p.out = append(p.out, '{')
	n := 0
	for {
		p.skipSpace()
		if p.eof() {
			return p.errorf(open, "unexpected end of input, '{' is never closed")
		}
		switch p.src[p.pos] {
		case '}':
			p.pos++
			p.out = append(p.out, '}')
			return nil
		case ',': // separators, trailing and doubled commas
			p.pos++
			continue
		}
		if n > 0 {
			p.out = append(p.out, ',')
		}
		n++
		if err := p.key(); err != nil {
			return err
		}
		p.skipSpace()
		if p.eof() {
			return p.errorf(p.pos, "unexpected end of input, expected ':'")
		}
		if p.src[p.pos] != ':' {
			return p.errorf(p.pos, "expected ':' after property name")
		}
		p.pos++
		p.out = append(p.out, ':')
		p.skipSpace()
		if err := p.value(); err != nil {
			return err
		}
	}
}

func (p *repairer) key() *SyntaxError {
	switch p.src[p.pos] {
	case '"', '\'':
		return p.str()
	}
	start := p.pos
	end := wordEnd(p.src, start)
	if end == start {
		return p.errorf(start, "expected a property name")
	}
	p.out = appendJSONString(p.out, string(p.src[start:end]))
	p.pos = end
	return nil
}

func (p *repairer) array() *SyntaxError {
	open := p.pos
	p.pos++
	p.out = append(p.out, '[')
	n := 0
	for {
		p.skipSpace()
		if p.eof() {
			return p.errorf(open, "unexpected end of input, '[' is never closed")
		}
		switch p.src[p.pos] {
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			return nil
		case ',':
			p.pos++
			continue
		}
		if n > 0 {
			p.out = append(p.out, ',')
		}
		n++
		if err := p.value(); err != nil {
			return err
		}
	}
}

// str re-emits a double- or single-quoted string as a JSON string. A valid
// double-quoted string comes out byte for byte; otherwise raw control
// characters are escaped, `\'` becomes `'`, an unknown escape keeps its
// backslash literally, and in single-quoted strings `"` is escaped.
func (p *repairer) str() *SyntaxError {
	open := p.pos
	quote := p.src[open]
	p.out = append(p.out, '"')
	for i := open + 1; i < len(p.src); i++ {
		c := p.src[i]
		switch {
		case c == quote:
			p.out = append(p.out, '"')
			p.pos = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(p.src) {
				return p.errorf(open, "unterminated string")
			}
			switch n := p.src[i+1]; n {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.out = append(p.out, c, n)
				i++
			case '\'':
				p.out = append(p.out, '\'')
				i++
			case 'u':
				if i+5 < len(p.src) && isHex4(p.src[i+2:i+6]) {
					p.out = append(p.out, p.src[i:i+6]...)
					i += 5
				} else {
					p.out = append(p.out, '\\', '\\')
				}
			default:
				p.out = append(p.out, '\\', '\\')
			}
		case c == '"': // only in single-quoted strings
			p.out = append(p.out, '\\', '"')
		case c < 0x20:
			p.out = appendControl(p.out, c)
		default:
			p.out = append(p.out, c)
		}
	}
	return p.errorf(open, "unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func appendControl(out []byte, c byte) []byte {
	switch c {
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	const hex = "0123456789abcdef"
	return append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}

// appendJSONString appends s as a JSON string.
func appendJSONString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = appendControl(out, c)
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// wordEnd returns the end of the bare word (unquoted key, literal or
// number) starting at i.
func wordEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '}', '[', ']', ':', ',', '"', '\'', ' ', '\t', '\n', '\r':
			return i
		case '/':
			if i+1 < len(b) && (b[i+1] == '/' || b[i+1] == '*') {
				return i
			}
		}
	}
	return i
}

// literal maps JSON and Python literals to JSON.
func literal(w []byte) (string, bool) {
	switch string(w) {
	case "true", "True":
		return "true", true
	case "false", "False":
		return "false", true
	case "null", "None":
		return "null", true
	}
	return "", false
}

// number accepts a JSON number, plus a leading '+', a leading '.' and a
// trailing '.', which it rewrites into JSON.
func number(w []byte) (string, bool) {
	s := string(w)
	s = strings.TrimPrefix(s, "+")
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if strings.HasPrefix(s, ".") {
		s = "0" + s
	}
	s = strings.TrimSuffix(s, ".")
	if neg {
		s = "-" + s
	}
	if !isJSONNumber(s) {
		return "", false
	}
	return s, true
}

// isJSONNumber checks the JSON number grammar.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
