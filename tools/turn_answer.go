package tools

import (
	"errors"
	"fmt"
	"strings"
)

// Answer is what the model reads about one call of a turn.
type Answer struct {
	CallID  string
	Name    string
	Content string
	IsError bool
}

// noOutput is the content of an answer with nothing to say: some
// providers refuse an empty tool result, and the model should know the
// call ran.
const noOutput = "(no output)"

// TurnMessages renders answers, in order, as the messages that go into the
// next model request in dialect d: OpenAI chat tool messages, Responses
// function_call_output items, or one Anthropic user message of
// tool_result blocks. A ReAct turn has no messages (TurnObservation).
func TurnMessages(d Dialect, answers []Answer) []any {
	out := []any{}
	switch d {
	case DialectOpenAIChat:
		for _, a := range answers {
			out = append(out, map[string]any{"role": "tool", "tool_call_id": a.CallID, "content": a.Content})
		}
	case DialectOpenAIResponses:
		for _, a := range answers {
			out = append(out, map[string]any{"type": "function_call_output", "call_id": a.CallID, "output": a.Content})
		}
	case DialectAnthropic:
		if len(answers) == 0 {
			return out
		}
		blocks := make([]any, 0, len(answers))
		for _, a := range answers {
			blocks = append(blocks, map[string]any{"type": "tool_result", "tool_use_id": a.CallID, "content": a.Content, "is_error": a.IsError})
		}
		out = append(out, map[string]any{"role": "user", "content": blocks})
	}
	return out
}

// TurnObservation renders answers as ReAct observations, one
// "Observation: …" per call in order.
func TurnObservation(answers []Answer) string {
	var b strings.Builder
	for i, a := range answers {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("Observation: ")
		b.WriteString(a.Content)
	}
	return b.String()
}

// AnswerText is what the model reads of a call's result: its content; for
// a failure, what failed ("Error: …"); and a line per artifact saying what
// was produced (the artifact itself stays out of the text: the program
// fetches it from its URL). It is never empty.
func AnswerText(r Result) (text string, isError bool) {
	var b strings.Builder
	b.WriteString(strings.TrimRight(r.Content, "\n"))
	for _, a := range r.Artifacts {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[produced %s (%s, %s); it is kept apart for the program and not shown here]", a.Name, a.MimeType, formatBytes(a.Size))
	}
	if !r.OK {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		msg := r.Error
		if msg == "" {
			msg = "the call failed"
		}
		b.WriteString("Error: ")
		b.WriteString(msg)
	}
	if b.Len() == 0 {
		return noOutput, !r.OK
	}
	return b.String(), !r.OK
}

// ProblemText is what the model reads about a call that could not run at
// all: an unknown tool (with the closest name), arguments that fail the
// schema (every field and what it expected), a ReAct format problem.
func ProblemText(tool string, err error) string {
	var ve *ValidationError
	switch {
	case errors.As(err, &ve) && ve.Tool != "":
		return "Error: " + ve.Error() + ". Correct the arguments and call " + ve.Tool + " again."
	case errors.As(err, &ve) && len(ve.Problems) == 1 && ve.Problems[0].Field == RootField:
		return "Error: " + ve.Problems[0].Message
	case errors.Is(err, ErrUnknownTool):
		return "Error: " + err.Error()
	case err != nil:
		return "Error: " + err.Error()
	}
	return "Error: the call of " + tool + " could not run"
}
