package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// maxStringLayers bounds how many times arguments may be JSON-encoded into a
// string ("\"{\\\"a\\\":1}\"" happens).
const maxStringLayers = 3

// Prepare resolves a call against the registry: it finds the tool (by name
// or alias, case-insensitively), assigns an ID when missing, parses and
// repairs the arguments, and validates them against the tool's compiled
// input schema.
//
// Arguments may be an object, a JSON string holding one (OpenAI), or
// null/empty ({}); malformed JSON is repaired (see Repair). For a tool whose
// schema was wrapped (non-object input), a bare value, or an object without
// the "input" key, becomes {"input": value}; a string that is not JSON at all
// becomes {"input": "<the string>"}.
//
// The returned Call has the canonical tool name, an ID and the validated
// arguments as compact JSON. args holds them decoded the encoding/json way
// (numbers are float64; a number float64 cannot hold is a validation
// problem). Prepare does not check that the tool is Runnable.
//
// Errors: ErrUnknownTool (wrapped; the message names the closest known
// tool), *ValidationError (matches ErrInvalidCall).
func (r *Registry) Prepare(c Call) (Call, *Tool, map[string]any, error) {
	r.mu.RLock()
	e := r.find(c.Name)
	r.mu.RUnlock()
	if e == nil && r.onMiss(c.Name) {
		r.mu.RLock()
		e = r.find(c.Name)
		r.mu.RUnlock()
	}
	if e == nil {
		r.mu.RLock()
		err := r.unknownTool(c.Name)
		r.mu.RUnlock()
		return c, nil, nil, err
	}

	t := e.tool
	c.Name = t.Name
	if c.ID == "" {
		c.ID = NewCallID()
	}
	doc, verr := e.decodeArguments(c.Arguments)
	if verr != nil {
		return c, t, nil, verr
	}
	if err := e.input.Validate(doc); err != nil {
		return c, t, nil, &ValidationError{Tool: t.Name, Problems: schemaProblems(err)}
	}
	conv, problems := toFloat(doc, "")
	if len(problems) > 0 {
		return c, t, nil, &ValidationError{Tool: t.Name, Problems: sortProblems(problems)}
	}
	args, ok := conv.(map[string]any)
	if !ok { // the schema is always an object schema; keep the promise anyway
		return c, t, nil, invalidCall(t.Name, RootField, "expected object, got "+jsonType(doc))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "ls > out" readable where arguments are stored
	if err := enc.Encode(doc); err != nil {
		// Cannot happen: doc came from JSON.
		return c, t, nil, invalidCall(t.Name, RootField, "arguments cannot be encoded: "+err.Error())
	}
	c.Arguments = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return c, t, args, nil
}

// decodeArguments turns raw arguments into an object with json.Number
// numbers (exact for validation). Non-objects are returned as is for the
// schema to reject, unless the schema is wrapped.
func (e *entry) decodeArguments(raw json.RawMessage) (any, *ValidationError) {
	raw = bytes.TrimSpace(raw)
	text, isText := "", false // the innermost string layer, when there is one
	for range maxStringLayers {
		if len(raw) == 0 || raw[0] != '"' {
			break
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			break // not a valid JSON string: let Repair have a go
		}
		text, isText = s, true
		raw = bytes.TrimSpace([]byte(s))
	}
	if len(raw) == 0 || string(raw) == "null" {
		if e.wrapped && isText && text != "" {
			return map[string]any{WrapKey: text}, nil // only white space: still the value
		}
		return map[string]any{}, nil
	}
	fixed, err := Repair(raw)
	if err != nil {
		if e.wrapped && isText {
			return map[string]any{WrapKey: text}, nil
		}
		var se *SyntaxError
		if errors.As(err, &se) && isText {
			se.Reason += " (in the arguments string)"
		}
		return nil, invalidCall(e.tool.Name, RootField, err.Error())
	}
	v, err := decodeOrdered(fixed)
	if err != nil { // cannot happen: Repair returns valid JSON
		return nil, invalidCall(e.tool.Name, RootField, err.Error())
	}
	if e.wrapped {
		if obj, ok := v.(map[string]any); !ok || !hasKey(obj, WrapKey) {
			v = map[string]any{WrapKey: v}
		}
	}
	return v, nil
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// toFloat converts json.Number values to float64, the encoding/json
// convention tools are written against. Numbers out of float64's range are
// problems.
func toFloat(v any, ptr string) (any, []Problem) {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, []Problem{{Field: pointerOrRoot(ptr), Message: "number " + short(string(v)) + " is out of range"}}
		}
		return f, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		var problems []Problem
		for k, x := range v {
			y, p := toFloat(x, ptr+"/"+escapePointer(k))
			out[k] = y
			problems = append(problems, p...)
		}
		return out, problems
	case []any:
		out := make([]any, len(v))
		var problems []Problem
		for i, x := range v {
			y, p := toFloat(x, ptr+"/"+strconv.Itoa(i))
			out[i] = y
			problems = append(problems, p...)
		}
		return out, problems
	default:
		return v, nil
	}
}

// pointerEscaper escapes a JSON Pointer token (RFC 6901). Built once: a
// Replacer per token cost more than the rest of an argument's validation.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return pointerEscaper.Replace(tok)
}

func pointerOrRoot(p string) string {
	if p == "" {
		return RootField
	}
	return p
}
