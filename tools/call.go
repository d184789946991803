package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/sandboxd/sandboxd/internal/ids"
)

// NewCallID returns a fresh call id: "call_" and 26 characters, ordered by
// creation time (ids.New).
func NewCallID() string { return ids.New("call_") }

// wireCall is the union of the call shapes models and protocols produce.
type wireCall struct {
	ID     json.RawMessage `json:"id"`      // string, or a JSON-RPC number
	CallID string          `json:"call_id"` // OpenAI Responses API
	Type   string          `json:"type"`
	Name   string          `json:"name"`
	// Arguments: plain, OpenAI (a JSON string) and MCP (an object).
	Arguments json.RawMessage `json:"arguments"`
	// Input: Anthropic tool_use.
	Input json.RawMessage `json:"input"`
	// Parameters: some open models write this instead of arguments.
	Parameters json.RawMessage `json:"parameters"`
	// Function: OpenAI chat completions tool_calls entries.
	Function *wireCall `json:"function"`
	// Params: an MCP JSON-RPC tools/call request.
	Method string    `json:"method"`
	Params *wireCall `json:"params"`
}

// ParseCall reads one tool call in any of the shapes models produce:
//
//	plain      {"id":"c1","name":"bash","arguments":{...} or "<json>"}
//	OpenAI     {"id":"call_1","type":"function","function":{"name":"bash","arguments":"<json>"}}
//	Responses  {"type":"function_call","call_id":"call_1","name":"bash","arguments":"<json>"}
//	Anthropic  {"type":"tool_use","id":"toolu_1","name":"bash","input":{...}}
//	MCP        {"name":"bash","arguments":{...}} (tools/call params, or the whole
//	           JSON-RPC request {"jsonrpc":"2.0","method":"tools/call","params":{...}})
//
// The envelope itself may be malformed the way models write JSON; it is
// repaired like arguments are. Arguments are kept as sent (an object, or a
// JSON string holding one); Registry.Prepare parses and validates them. A
// missing id is created with NewCallID. Errors are *ValidationError (they
// match ErrInvalidCall).
func ParseCall(raw []byte) (Call, error) {
	fixed, err := Repair(raw)
	if err != nil {
		return Call{}, invalidCall("", RootField, err.Error())
	}
	var w wireCall
	if err := json.Unmarshal(fixed, &w); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case !bytes.HasPrefix(fixed, []byte("{")):
			return Call{}, invalidCall("", RootField, "a tool call must be a JSON object")
		case errors.As(err, &te) && te.Field != "":
			return Call{}, invalidCall("", "/"+strings.ReplaceAll(te.Field, ".", "/"), "expected "+wantType(te.Type.Kind())+", got "+te.Value)
		default:
			return Call{}, invalidCall("", RootField, "malformed tool call: "+err.Error())
		}
	}
	c := w.call()
	if c.Name == "" {
		return Call{}, invalidCall("", "/name", "missing tool name")
	}
	if c.ID == "" {
		c.ID = NewCallID()
	}
	return c, nil
}

// call flattens the envelope; an inner envelope's fields win.
func (w *wireCall) call() Call {
	c := Call{Name: strings.TrimSpace(w.Name)}
	if w.Method == "" { // a JSON-RPC request's id names the request, not the call
		c.ID = w.id()
	}
	for _, a := range []json.RawMessage{w.Arguments, w.Input, w.Parameters} {
		if len(a) > 0 && string(a) != "null" {
			c.Arguments = a
			break
		}
	}
	for _, inner := range []*wireCall{w.Function, w.Params} {
		if inner == nil {
			continue
		}
		in := inner.call()
		if in.Name != "" {
			c.Name = in.Name
		}
		if in.ID != "" && c.ID == "" {
			c.ID = in.ID
		}
		if len(in.Arguments) > 0 {
			c.Arguments = in.Arguments
		}
	}
	return c
}

// id is call_id, or id when it is a string.
func (w *wireCall) id() string {
	if w.CallID != "" {
		return w.CallID
	}
	var s string
	if json.Unmarshal(w.ID, &s) == nil {
		return s
	}
	return ""
}

func wantType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "object"
	default:
		return k.String()
	}
}
