package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type wantCall struct {
	id, name, args     string // args "" : not checked
	generated, problem bool
}

func TestParseTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		dialect Dialect
		session string
		calls   []wantCall
		final   string
	}{
		{"chat message", `{"role":"assistant","content":null,"session_id":"ses_1","tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},
			{"id":"call_b","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]}`,
			DialectOpenAIChat, "ses_1", []wantCall{{id: "call_a", name: "bash", args: `"{\"command\":\"ls\"}"`}, {id: "call_b", name: "calculator"}}, ""},
		{"chat tool_calls array", `[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}}]`,
			DialectOpenAIChat, "", []wantCall{{id: "c1", name: "read_file"}}, ""},
		{"chat completion", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"bash","arguments":"{}"}}]}}]}`,
			DialectOpenAIChat, "", []wantCall{{name: "bash", generated: true}}, ""},
		{"chat without calls", `{"role":"assistant","content":"All done."}`, DialectOpenAIChat, "", nil, ""},
		{"responses output", `{"id":"resp_1","object":"response","output":[
			{"type":"reasoning","id":"rs_1","summary":[]},
			{"type":"function_call","id":"fc_1","call_id":"call_x","name":"bash","arguments":"{\"command\":\"pwd\"}"},
			{"type":"function_call","id":"fc_2","call_id":"call_y","name":"calculator","arguments":"{\"expression\":\"2\"}"}]}`,
			DialectOpenAIResponses, "", []wantCall{{id: "call_x", name: "bash"}, {id: "call_y", name: "calculator"}}, ""},
		{"responses items", `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]},
			{"type":"function_call","call_id":"call_z","name":"bash","arguments":"{}"}]`,
			DialectOpenAIResponses, "", []wantCall{{id: "call_z", name: "bash"}}, ""},
		{"responses item", `{"type":"function_call","name":"bash","arguments":"{}"}`,
			DialectOpenAIResponses, "", []wantCall{{name: "bash", generated: true}}, ""},
		{"anthropic message", `{"id":"msg_1","type":"message","role":"assistant","stop_reason":"tool_use","content":[
			{"type":"text","text":"Let me check."},
			{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}},
			{"type":"tool_use","name":"calculator","input":{"expression":"3"}}]}`,
			DialectAnthropic, "", []wantCall{{id: "toolu_1", name: "bash", args: `{"command":"ls"}`}, {name: "calculator", generated: true}}, ""},
		{"anthropic content", `[{"type":"tool_use","id":"toolu_2","name":"read_file","input":{"path":"a"}}]`,
			DialectAnthropic, "", []wantCall{{id: "toolu_2", name: "read_file"}}, ""},
		{"anthropic without calls", `{"type":"message","role":"assistant","stop_reason":"end_turn","content":"done"}`, DialectAnthropic, "", nil, ""},
		{"anthropic unnamed call", `[{"type":"tool_use","id":"toolu_3","input":{}}]`,
			DialectAnthropic, "", []wantCall{{id: "toolu_3", problem: true}}, ""},
		{"react text", "Thought: I should list files.\nAction: bash\nAction Input: {\"command\": \"ls\"}\n",
			DialectReAct, "", []wantCall{{name: "bash", args: `"{\"command\": \"ls\"}"`, generated: true}}, ""},
		{"react multi-line input and observation", "Thought: x\nAction: python_repl\nAction Input: {\"code\":\n\"print(1)\"}\nObservation: 1\nAction: bash\nAction Input: ls",
			DialectReAct, "", []wantCall{{name: "python_repl", args: `"{\"code\":\n\"print(1)\"}"`, generated: true}}, ""},
		{"react two actions", "Action: bash\nAction Input: ls\nThought: and\nAction 2: calculator\nAction 2 Input: 1+1",
			DialectReAct, "", []wantCall{{name: "bash", args: `"ls"`, generated: true}, {name: "calculator", args: `"1+1"`, generated: true}}, ""},
		{"react final", "Thought: I know.\nFinal Answer: 42\nit is", DialectReAct, "", nil, "42\nit is"},
		{"react json", `{"text":"Action: bash\nAction Input: ls","session_id":"ses_2"}`,
			DialectReAct, "ses_2", []wantCall{{name: "bash", generated: true}}, ""},
		{"react string", `"Final Answer: yes"`, DialectReAct, "", nil, "yes"},
		{"react both", "Action: bash\nAction Input: ls\nFinal Answer: done", DialectReAct, "", []wantCall{{problem: true, generated: true}}, "done"},
		{"react neither", "I think the answer is 4.", DialectReAct, "", []wantCall{{problem: true, generated: true}}, ""},
		{"react no input", "Thought: t\nAction: bash", DialectReAct, "", []wantCall{{name: "bash", problem: true, generated: true}}, ""},
		{"repaired envelope", `{'role': 'assistant', 'tool_calls': [{'id': 'q1', 'type': 'function', 'function': {'name': 'bash', 'arguments': '{}'},},],}`,
			DialectOpenAIChat, "", []wantCall{{id: "q1", name: "bash"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn, err := ParseTurn([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if turn.Dialect != tt.dialect || turn.SessionID != tt.session {
				t.Errorf("dialect %q session %q, want %q %q", turn.Dialect, turn.SessionID, tt.dialect, tt.session)
			}
			if turn.FinalAnswer != tt.final {
				t.Errorf("final %q, want %q", turn.FinalAnswer, tt.final)
			}
			if len(turn.Calls) != len(tt.calls) {
				t.Fatalf("calls = %+v, want %d", turn.Calls, len(tt.calls))
			}
			for i, w := range tt.calls {
				c := turn.Calls[i]
				if c.ID == "" || (w.id != "" && c.ID != w.id) || c.Name != w.name || c.GeneratedID != w.generated || (c.Problem != nil) != w.problem {
					t.Errorf("call %d = %+v (problem %v), want %+v", i, c.Call, c.Problem, w)
				}
				if w.args != "" && string(c.Arguments) != w.args {
					t.Errorf("call %d arguments %s, want %s", i, c.Arguments, w.args)
				}
			}
		})
	}
}

func TestParseTurnRefused(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "  ", "[]", `{"foo":1}`, `[{"type":"tool_use","name":"a","input":{}},{"type":"function_call","name":"b","arguments":"{}"}]`, `[1,2]`, `{"tool_calls": [`} {
		_, err := ParseTurn([]byte(body))
		if err == nil {
			t.Errorf("ParseTurn(%q) accepted", body)
			continue
		}
		if !errors.Is(err, ErrUnknownDialect) && !errors.Is(err, ErrInvalidCall) {
			t.Errorf("ParseTurn(%q) = %v, want ErrUnknownDialect or ErrInvalidCall", body, err)
		}
	}
	many := `[` + strings.Repeat(`{"type":"tool_use","name":"a","input":{}},`, MaxTurnCalls) + `{"type":"tool_use","name":"a","input":{}}]`
	if _, err := ParseTurn([]byte(many)); err == nil {
		t.Error("accepted more than MaxTurnCalls calls")
	}
}

func TestReActArguments(t *testing.T) {
	t.Parallel()
	bash := &Tool{InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout_seconds":{"type":"number"}},"required":["command"]}`)}
	two := &Tool{InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"]}`)}
	tests := []struct {
		tool *Tool
		in   string
		want string
	}{
		{bash, `{"command": "ls"}`, `"{\"command\": \"ls\"}"`},
		{bash, `{'command': 'ls',}`, `"{'command': 'ls',}"`},
		{bash, `ls -la /tmp`, `{"command":"ls -la /tmp"}`},
		{bash, `"ls -la"`, `{"command":"ls -la"}`},
		{two, `just text`, `"just text"`},
	}
	for _, tt := range tests {
		if got := string(ReActArguments(tt.tool, tt.in)); got != tt.want {
			t.Errorf("ReActArguments(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTurnMessages(t *testing.T) {
	t.Parallel()
	answers := []Answer{{CallID: "c1", Name: "bash", Content: "ok"}, {CallID: "c2", Name: "calc", Content: "Error: x", IsError: true}}
	tests := []struct {
		d    Dialect
		want string
	}{
		{DialectOpenAIChat, `[{"content":"ok","role":"tool","tool_call_id":"c1"},{"content":"Error: x","role":"tool","tool_call_id":"c2"}]`},
		{DialectOpenAIResponses, `[{"call_id":"c1","output":"ok","type":"function_call_output"},{"call_id":"c2","output":"Error: x","type":"function_call_output"}]`},
		{DialectAnthropic, `[{"content":[{"content":"ok","is_error":false,"tool_use_id":"c1","type":"tool_result"},{"content":"Error: x","is_error":true,"tool_use_id":"c2","type":"tool_result"}],"role":"user"}]`},
		{DialectReAct, `[]`},
	}
	for _, tt := range tests {
		b, _ := json.Marshal(TurnMessages(tt.d, answers))
		if string(b) != tt.want {
			t.Errorf("%s: %s\nwant %s", tt.d, b, tt.want)
		}
	}
	if got := TurnObservation(answers); got != "Observation: ok\nObservation: Error: x" {
		t.Errorf("observation %q", got)
	}
}

func TestAnswerText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    Result
		want string
		err  bool
	}{
		{Result{OK: true, Content: "4\n"}, "4", false},
		{Result{OK: true}, "(no output)", false},
		{Result{OK: false, Content: "Traceback ...\n", Error: "process exited with code 1"}, "Traceback ...\n\nError: process exited with code 1", true},
		{Result{OK: false}, "Error: the call failed", true},
		{Result{OK: true, Content: "plotted", Artifacts: []Artifact{{Name: "figure-1.png", MimeType: "image/png", Size: 2048, URL: "/v1/jobs/j/artifacts/figure-1.png"}}},
			"plotted\n[produced figure-1.png (image/png, 2 KiB); it is kept apart for the program and not shown here]", false},
	}
	for _, tt := range tests {
		got, isErr := AnswerText(tt.r)
		if got != tt.want || isErr != tt.err {
			t.Errorf("AnswerText(%+v) = %q, %v; want %q, %v", tt.r, got, isErr, tt.want, tt.err)
		}
		if strings.Contains(got, "/v1/jobs") {
			t.Errorf("the artifact URL reached the model's text: %q", got)
		}
	}
	ve := &ValidationError{Tool: "read_file", Problems: []Problem{{Field: "/path", Message: "expected string, got number"}}}
	if got := ProblemText("read_file", ve); got != "Error: invalid arguments for read_file: /path: expected string, got number. Correct the arguments and call read_file again." {
		t.Errorf("ProblemText = %q", got)
	}
}

// FuzzParseTurn: any body either parses into calls that each have an id
// (and a name or a problem) or is refused with a classified error; it
// never panics.
func FuzzParseTurn(f *testing.F) {
	for _, s := range []string{
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"bash","arguments":"{}"}}]}`,
		`[{"type":"function_call","call_id":"c","name":"x","arguments":"{"}]`,
		`{"content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}`,
		"Thought: t\nAction: a\nAction Input: {\"x\":1}\nObservation:",
		`{"choices":[{"message":{"choices":[]}}]}`, `"Final Answer: 1"`, `[{"function":null}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		turn, err := ParseTurn(body)
		if err != nil {
			if !errors.Is(err, ErrUnknownDialect) && !errors.Is(err, ErrInvalidCall) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if turn.Dialect == "" {
			t.Fatal("no dialect")
		}
		if len(turn.Calls) > MaxTurnCalls {
			t.Fatalf("%d calls", len(turn.Calls))
		}
		for _, c := range turn.Calls {
			if c.ID == "" || (c.Name == "" && c.Problem == nil) {
				t.Fatalf("call %+v", c)
			}
		}
	})
}

// A turn's object body may carry "callback_url" beside "session_id", also
// around ReAct text.
func TestParseTurnCallbackURL(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"role":"assistant","callback_url":"https://example.com/h","tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}]}`,
		`{"text":"Action: bash\nAction Input: ls","callback_url":"https://example.com/h"}`,
	} {
		turn, err := ParseTurn([]byte(body))
		if err != nil || turn.CallbackURL != "https://example.com/h" || len(turn.Calls) != 1 {
			t.Errorf("%s: callback %q, %d calls, %v", body, turn.CallbackURL, len(turn.Calls), err)
		}
	}
}
