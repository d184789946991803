package tools

import (
	"errors"
	"strings"
)

// Sentinel errors. Callers match them with errors.Is; messages wrap them with
// the detail (the bad name, the closest known tool, ...).
var (
	// ErrUnknownTool: a call or export names a tool the registry does not
	// hold. The wrapped message names the closest known tool and a few
	// others.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidTool: a tool definition was refused at registration (bad
	// name, unknown effect, schema that does not compile, ...).
	ErrInvalidTool = errors.New("invalid tool definition")
	// ErrInvalidCall: a call or its arguments cannot be used. Every
	// *ValidationError matches it, so errors.Is(err, ErrInvalidCall) is the
	// one check for "the model sent something bad" (HTTP 400/422).
	ErrInvalidCall = errors.New("invalid tool call")
	// ErrUnknownFormat: an export format other than openai, anthropic, mcp.
	ErrUnknownFormat = errors.New("unknown export format")
	// ErrInfrastructure: an in-process tool's Run could not get an answer
	// for reasons that are not the call's (the MCP provider behind it died
	// or is restarting). The job service treats it like a sandbox fault:
	// failed with reason internal, retried when that is safe. Wrap it
	// together with ErrNotStarted when the call provably never reached the
	// tool.
	ErrInfrastructure = errors.New("tool infrastructure failure")
	// ErrNotStarted marks an infrastructure failure before the call
	// reached the tool (nothing can have happened): such a call may always
	// be retried.
	ErrNotStarted = errors.New("the call never started")
	// ErrUnknownDialect: a turn body in none of the dialects ParseTurn
	// reads.
	ErrUnknownDialect = errors.New("unknown turn dialect")
)

// RootField is the Field of a Problem about the whole arguments object (the
// JSON pointer "").
const RootField = "(root)"

// ValidationError says what is wrong with a call or its arguments, in words a
// model can act on. Problems are sorted by field, then message.
type ValidationError struct {
	// Tool is the canonical tool name; empty when the call itself could not
	// be parsed.
	Tool string
	// Problems each name a field (a JSON pointer such as "/timeout_seconds",
	// RootField for the whole object) and what was expected.
	Problems []Problem
}

// Problem is one violation.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Tool == "" {
		b.WriteString("invalid tool call:")
	} else {
		b.WriteString("invalid arguments for ")
		b.WriteString(e.Tool)
		b.WriteByte(':')
	}
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteByte(' ')
		field := p.Field
		if field == "" {
			field = RootField
		}
		b.WriteString(field)
		b.WriteString(": ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// Is makes every *ValidationError match ErrInvalidCall.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidCall }

// invalidCall builds a one-problem ValidationError.
func invalidCall(tool, field, msg string) *ValidationError {
	if field == "" {
		field = RootField
	}
	return &ValidationError{Tool: tool, Problems: []Problem{{Field: field, Message: msg}}}
}
