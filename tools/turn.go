package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Dialect is the shape of a model turn: how its tool calls are written and
// how the answers must be written back.
type Dialect string

const (
	// DialectOpenAIChat: OpenAI Chat Completions. In: the assistant
	// message, its tool_calls array or the whole completion (choices);
	// out: {"role":"tool","tool_call_id","content"} messages.
	DialectOpenAIChat Dialect = "openai_chat"
	// DialectOpenAIResponses: the OpenAI Responses API. In: function_call
	// items (the response's output array, or the response); out:
	// function_call_output items.
	DialectOpenAIResponses Dialect = "openai_responses"
	// DialectAnthropic: Anthropic Messages. In: the assistant message, its
	// content array or tool_use blocks; out: one user message whose
	// content is tool_result blocks.
	DialectAnthropic Dialect = "anthropic"
	// DialectReAct: ReAct text ("Thought: … Action: <tool> Action Input:
	// <json or text>", or "Final Answer: …"); out: "Observation: …" text.
	DialectReAct Dialect = "react"
)

// MaxTurnCalls bounds the calls of one turn.
const MaxTurnCalls = 128

// Turn is the tool calls of one assistant turn, in the model's order.
type Turn struct {
	Dialect Dialect
	Calls   []TurnCall
	// SessionID is the body's top-level "session_id", when it has one.
	SessionID string
	// CallbackURL is the body's top-level "callback_url", when it has
	// one: POSTed the batch when every call is answered.
	CallbackURL string
	// Tags and Metadata are the body's top-level "tags" and "metadata",
	// when it has them: the client's labels of the batch and its jobs.
	Tags     []string
	Metadata map[string]string
	// FinalAnswer is a ReAct turn's "Final Answer:" text; HasFinal says
	// the turn has one (it then has nothing to run).
	FinalAnswer string
	HasFinal    bool
}

// TurnCall is one call of a turn.
type TurnCall struct {
	// Call has the model's id (or a created one), name and arguments as
	// written; Registry.Prepare resolves and validates it.
	Call
	// GeneratedID is set when the model gave no id and Call.ID was
	// created (the answer refers to the created id).
	GeneratedID bool
	// Text is set for ReAct calls: Arguments is the Action Input text as
	// a JSON string (see ReActArguments).
	Text bool
	// Problem is set when the call itself cannot be read (no tool name, a
	// malformed envelope, a ReAct action without its input). Nothing runs;
	// the call's answer says what is wrong.
	Problem *ValidationError
}

// ParseTurn reads one assistant turn in any dialect, detected from the
// body:
//
//	OpenAI chat       {"role":"assistant","tool_calls":[...]}, [{"id","type":"function","function":{...}}],
//	                  {"choices":[{"message":{...}}]} (a chat completion)
//	OpenAI Responses  [{"type":"function_call","call_id","name","arguments"}, ...], {"output":[...]} (a response)
//	Anthropic         {"role":"assistant","content":[...]}, [{"type":"tool_use","id","name","input"}, ...]
//	ReAct             plain text, a JSON string, or {"text":"Thought: ..."}
//
// An object body may carry "session_id" beside the turn. Each call is read
// with ParseCall (so the envelope is repaired like arguments are); a call
// that cannot be read is kept with its Problem so that the model still gets
// an answer for it. Errors (the body is none of these, or has more than
// MaxTurnCalls calls) wrap ErrUnknownDialect or are *ValidationError.
func ParseTurn(body []byte) (Turn, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return Turn{}, fmt.Errorf("%w: the body is empty", ErrUnknownDialect)
	}
	switch body[0] {
	case '{', '[', '"':
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			fixed, rerr := Repair(body)
			if rerr != nil {
				if body[0] != '"' && reactMarker.Match(body) {
					return parseReAct(string(body))
				}
				return Turn{}, invalidCall("", RootField, "the body is not valid JSON: "+err.Error())
			}
			body = fixed
		}
	default:
		return parseReAct(string(body))
	}
	var t Turn
	err := t.parseValue(body, 0)
	if err != nil {
		return Turn{}, err
	}
	if len(t.Calls) > MaxTurnCalls {
		return Turn{}, invalidCall("", RootField, fmt.Sprintf("the turn has %d tool calls; at most %d are accepted", len(t.Calls), MaxTurnCalls))
	}
	return t, nil
}

// turnObject is the union of the object shapes a turn arrives in.
type turnObject struct {
	SessionID   string            `json:"session_id"`
	CallbackURL string            `json:"callback_url"`
	Tags        []string          `json:"tags"`
	Metadata    map[string]string `json:"metadata"`
	Text        *string           `json:"text"`
	Role        string            `json:"role"`
	Type        string            `json:"type"`
	Choices     []struct {
		Message json.RawMessage `json:"message"`
	} `json:"choices"`
	ToolCalls json.RawMessage `json:"tool_calls"`
	Output    json.RawMessage `json:"output"`
	Content   json.RawMessage `json:"content"`
	Function  json.RawMessage `json:"function"`
	// StopReason is set on Anthropic messages.
	StopReason *string `json:"stop_reason"`
}

// parseValue reads body (valid JSON). depth bounds the nesting of
// envelopes (a completion's message).
func (t *Turn) parseValue(body []byte, depth int) error {
	if depth > 2 {
		return fmt.Errorf("%w: too deeply nested", ErrUnknownDialect)
	}
	switch body[0] {
	case '"':
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return invalidCall("", RootField, "malformed string: "+err.Error())
		}
		rt, err := parseReAct(s)
		if err != nil {
			return err
		}
		rt.SessionID, rt.CallbackURL, rt.Tags, rt.Metadata = t.SessionID, t.CallbackURL, t.Tags, t.Metadata
		*t = rt
		return nil
	case '[':
		return t.parseArray(body)
	case '{':
	default:
		return fmt.Errorf("%w: a turn is a JSON object, array or string, or ReAct text", ErrUnknownDialect)
	}
	var o turnObject
	if err := json.Unmarshal(body, &o); err != nil {
		return invalidCall("", RootField, "malformed turn: "+err.Error())
	}
	if o.SessionID != "" {
		t.SessionID = o.SessionID
	}
	if o.CallbackURL != "" {
		t.CallbackURL = o.CallbackURL
	}
	if o.Tags != nil {
		t.Tags = o.Tags
	}
	if o.Metadata != nil {
		t.Metadata = o.Metadata
	}
	switch {
	case len(o.Choices) > 0:
		if len(o.Choices[0].Message) == 0 {
			return invalidCall("", "/choices/0/message", "a chat completion choice without a message")
		}
		return t.parseValue(bytes.TrimSpace(o.Choices[0].Message), depth+1)
	case isArray(o.ToolCalls):
		t.Dialect = DialectOpenAIChat
		return t.addCalls(o.ToolCalls, func([]byte) bool { return true })
	case isArray(o.Output):
		t.Dialect = DialectOpenAIResponses
		return t.addCalls(o.Output, itemOfType("function_call"))
	case isArray(o.Content):
		if o.Role == "assistant" && o.StopReason == nil && hasType(o.Content, "output_text") {
			// A Responses API message item: it has no calls.
			t.Dialect = DialectOpenAIResponses
			return nil
		}
		t.Dialect = DialectAnthropic
		return t.addCalls(o.Content, itemOfType("tool_use"))
	case o.Type == "function_call":
		t.Dialect = DialectOpenAIResponses
		return t.addCall(body)
	case o.Type == "tool_use":
		t.Dialect = DialectAnthropic
		return t.addCall(body)
	case len(o.Function) > 0 && string(o.Function) != "null":
		t.Dialect = DialectOpenAIChat
		return t.addCall(body)
	case o.Text != nil:
		return t.parseReActInto(*o.Text)
	case o.Role != "":
		var s string
		if json.Unmarshal(o.Content, &s) == nil && reactMarker.MatchString(s) {
			return t.parseReActInto(s)
		}
		// An assistant message with text and no calls: nothing to run.
		t.Dialect = DialectOpenAIChat
		if o.StopReason != nil || o.Type == "message" {
			t.Dialect = DialectAnthropic
		}
		return nil
	}
	return fmt.Errorf("%w: expected an assistant message, a tool_calls, output or content array, a tool call or ReAct text", ErrUnknownDialect)
}

func (t *Turn) parseReActInto(text string) error {
	rt, err := parseReAct(text)
	if err != nil {
		return err
	}
	rt.SessionID, rt.CallbackURL, rt.Tags, rt.Metadata = t.SessionID, t.CallbackURL, t.Tags, t.Metadata
	*t = rt
	return nil
}

// parseArray classifies an array by its items: OpenAI tool_calls entries,
// Responses items or Anthropic content blocks.
func (t *Turn) parseArray(body []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return invalidCall("", RootField, "malformed array: "+err.Error())
	}
	if len(items) == 0 {
		return fmt.Errorf("%w: an empty array says nothing about its dialect", ErrUnknownDialect)
	}
	var chat, responses, anthropic bool
	for _, it := range items {
		var h struct {
			Type     string          `json:"type"`
			Function json.RawMessage `json:"function"`
		}
		_ = json.Unmarshal(it, &h)
		switch h.Type {
		case "function_call", "function_call_output", "message", "reasoning", "web_search_call", "file_search_call", "computer_call":
			responses = true
		case "tool_use", "text", "thinking", "redacted_thinking", "server_tool_use":
			anthropic = true
		case "function":
			chat = true
		default:
			if len(h.Function) > 0 && string(h.Function) != "null" {
				chat = true
			}
		}
	}
	switch {
	case chat && !responses && !anthropic:
		t.Dialect = DialectOpenAIChat
		return t.addCalls(body, func([]byte) bool { return true })
	case responses && !chat && !anthropic:
		t.Dialect = DialectOpenAIResponses
		return t.addCalls(body, itemOfType("function_call"))
	case anthropic && !chat && !responses:
		t.Dialect = DialectAnthropic
		return t.addCalls(body, itemOfType("tool_use"))
	case !chat && !responses && !anthropic:
		return fmt.Errorf("%w: the array holds no OpenAI tool_calls entries, Responses items or Anthropic content blocks", ErrUnknownDialect)
	default:
		return fmt.Errorf("%w: the array mixes items of several dialects", ErrUnknownDialect)
	}
}

// addCalls adds every item of the array raw that keep selects.
func (t *Turn) addCalls(raw []byte, keep func([]byte) bool) error {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return invalidCall("", RootField, "malformed array: "+err.Error())
	}
	for _, it := range items {
		if len(t.Calls) > MaxTurnCalls {
			break // ParseTurn refuses the turn
		}
		if keep(it) {
			if err := t.addCall(it); err != nil {
				return err
			}
		}
	}
	return nil
}

// addCall parses one call with ParseCall; one that cannot be read is kept
// with its problem.
func (t *Turn) addCall(raw []byte) error {
	var ids struct {
		ID     json.RawMessage `json:"id"`
		CallID string          `json:"call_id"`
	}
	_ = json.Unmarshal(raw, &ids)
	var sid string
	_ = json.Unmarshal(ids.ID, &sid)
	tc := TurnCall{}
	c, err := ParseCall(raw)
	if err != nil {
		ve, ok := err.(*ValidationError)
		if !ok {
			return err
		}
		tc.Problem = ve
		c.ID = ids.CallID
		if c.ID == "" {
			c.ID = sid
		}
	}
	if ids.CallID == "" && sid == "" || c.ID == "" {
		tc.GeneratedID = true
		if c.ID == "" {
			c.ID = NewCallID()
		}
	}
	tc.Call = c
	t.Calls = append(t.Calls, tc)
	return nil
}

func isArray(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '['
}

func itemOfType(typ string) func([]byte) bool {
	return func(raw []byte) bool {
		var h struct {
			Type string `json:"type"`
		}
		return json.Unmarshal(raw, &h) == nil && h.Type == typ
	}
}

func hasType(raw json.RawMessage, typ string) bool {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return false
	}
	for _, it := range items {
		if itemOfType(typ)(it) {
			return true
		}
	}
	return false
}

// ReAct.

var (
	// reactMarker finds ReAct keywords at the start of a line.
	reactMarker = regexp.MustCompile(`(?m)^\s*(Action\s*\d*\s*:|Final\s+Answer\s*:)`)
	reactLine   = regexp.MustCompile(`^\s*(Thought|Action\s*\d*\s*Input|Action|Observation|Final\s+Answer)\s*\d*\s*:\s?(.*)$`)
)

// parseReAct reads ReAct text: each "Action:" names a tool and the
// following "Action Input:" (which may span lines, up to the next keyword)
// is its input; "Observation:" ends the turn (a model that goes on writing
// the observation itself); "Final Answer:" means there is nothing to run.
// Text that is neither (or both) becomes one call with the problem, as
// LangChain's parser reports it, so the model reads what to fix.
func parseReAct(text string) (Turn, error) {
	t := Turn{Dialect: DialectReAct}
	type action struct {
		name, input string
		hasInput    bool
	}
	var actions []action
	var final []string
	inFinal, inInput := false, false
	for _, line := range strings.Split(text, "\n") {
		m := reactLine.FindStringSubmatch(line)
		if m == nil {
			switch {
			case inInput:
				a := &actions[len(actions)-1]
				a.input += "\n" + line
			case inFinal:
				final = append(final, line)
			}
			continue
		}
		kw := strings.Join(strings.Fields(m[1]), " ")
		kw = strings.TrimRight(kw, "0123456789 ")
		inFinal, inInput = false, false
		switch {
		case kw == "Observation":
			goto done
		case kw == "Thought":
		case strings.HasPrefix(kw, "Action") && strings.HasSuffix(kw, "Input"):
			if len(actions) == 0 || actions[len(actions)-1].hasInput {
				actions = append(actions, action{}) // an input without its action
			}
			a := &actions[len(actions)-1]
			a.input, a.hasInput, inInput = m[2], true, true
		case kw == "Action":
			actions = append(actions, action{name: strings.TrimSpace(m[2])})
		case strings.HasPrefix(kw, "Final"):
			t.HasFinal, inFinal = true, true
			final = append(final, m[2])
		}
	}
done:
	t.FinalAnswer = strings.TrimSpace(strings.Join(final, "\n"))
	problem := func(msg string) {
		t.Calls = append(t.Calls, TurnCall{Call: Call{ID: NewCallID()}, GeneratedID: true, Text: true,
			Problem: invalidCall("", RootField, msg)})
	}
	switch {
	case len(actions) > 0 && t.HasFinal:
		problem("Invalid Format: the output has both a Final Answer and an Action; write either an Action with its Action Input, or a Final Answer")
		return t, nil
	case len(actions) == 0 && !t.HasFinal:
		problem("Invalid Format: Missing 'Action:' after 'Thought:' (write 'Action: <tool name>' then 'Action Input: <JSON arguments>', or 'Final Answer: <answer>')")
		return t, nil
	}
	for _, a := range actions {
		name := strings.Trim(a.name, " \t`'\"*")
		switch {
		case name == "":
			problem("Invalid Format: Missing 'Action:' before 'Action Input:'")
		case !a.hasInput:
			tc := TurnCall{Call: Call{ID: NewCallID(), Name: name}, GeneratedID: true, Text: true,
				Problem: invalidCall("", RootField, "Invalid Format: Missing 'Action Input:' after 'Action:'")}
			t.Calls = append(t.Calls, tc)
		default:
			in := strings.TrimSpace(a.input)
			in = strings.TrimSpace(strings.Trim(in, "`"))
			raw, _ := json.Marshal(in)
			t.Calls = append(t.Calls, TurnCall{Call: Call{ID: NewCallID(), Name: name, Arguments: raw},
				GeneratedID: true, Text: true})
		}
		if len(t.Calls) > MaxTurnCalls {
			return Turn{}, invalidCall("", RootField, fmt.Sprintf("the turn has more than %d actions", MaxTurnCalls))
		}
	}
	return t, nil
}

// ReActArguments turns a ReAct Action Input into arguments for t. Input
// that repairs into a JSON object is the arguments (Registry.Prepare
// repairs it); other input (plain text, a quoted string, a number) is the
// value of t's one string parameter when its schema has exactly one
// (LangChain's single-input tools), so "Action Input: ls -la" calls bash
// with {"command": "ls -la"}. Anything else is left for Prepare to refuse
// with the reason.
func ReActArguments(t *Tool, input string) json.RawMessage {
	raw, _ := json.Marshal(input)
	fixed, err := Repair([]byte(input))
	if err == nil && len(fixed) > 0 && fixed[0] == '{' {
		return raw
	}
	text := input
	if err == nil && len(fixed) > 0 && fixed[0] == '"' {
		_ = json.Unmarshal(fixed, &text)
	}
	prop, ok := soleStringProperty(t.InputSchema)
	if !ok {
		return raw
	}
	b, _ := json.Marshal(map[string]string{prop: text})
	return b
}

// soleStringProperty returns the one string property a schema's required
// list names (or its only property, when nothing else is required).
func soleStringProperty(schema json.RawMessage) (string, bool) {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return "", false
	}
	name := ""
	switch {
	case len(s.Required) == 1:
		name = s.Required[0]
	case len(s.Required) == 0 && len(s.Properties) == 1:
		for k := range s.Properties {
			name = k
		}
	default:
		return "", false
	}
	p, ok := s.Properties[name]
	if !ok || p.Type != "string" {
		return "", false
	}
	return name, true
}
