package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// cmdTurn sends one model turn (from a file or stdin) to POST
// /v1/tool-calls and prints the next turn's messages.
func cmdTurn(ctx context.Context, args []string, e env, stdin io.Reader) int {
	fs := flag.NewFlagSet("turn", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fs, e)
	session := fs.String("session", "", "run the calls in this session")
	key := fs.String("idempotency-key", "", "send the turn again with the same key: the same batch, no call runs twice")
	wait := fs.Duration("wait", 10*time.Minute, "how long to wait for every answer, approvals included (0: no limit)")
	output := fs.String("output", "messages", "messages (the next turn's messages, or the ReAct observation text) or json (the whole batch with sandboxd's per-call records)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: sandboxd turn [flags] [FILE]     (FILE, or stdin: one assistant turn)

Runs the tool calls of one model turn, as the model wrote it (OpenAI chat or
Responses, Anthropic, or ReAct text), and prints what goes into the next
request: the tool messages, or the "Observation: ..." text.
Exit status: 0 every call answered (an answer may be an error the model reads),
2 usage error, 3 server unreachable, error, or still waiting after --wait.

Flags:`)
		fs.PrintDefaults()
	}
	pos, code, ok := parseInterleaved(fs, args)
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "sandboxd turn: "+format+"\n", a...)
		return exitUsage
	}
	if len(pos) > 1 {
		return usageErr("want at most one FILE, got %d", len(pos))
	}
	if *output != "messages" && *output != "json" {
		return usageErr("--output %q: want messages or json", *output)
	}
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	var body []byte
	var err error
	if len(pos) == 1 && pos[0] != "-" {
		body, err = os.ReadFile(pos[0])
	} else {
		body, err = io.ReadAll(stdin)
	}
	if err != nil {
		return usageErr("%v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return usageErr("the turn is empty")
	}
	var deadline time.Time
	if *wait > 0 {
		deadline = time.Now().Add(*wait)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(30*time.Second))
		defer cancel()
	}
	left := func() time.Duration {
		if deadline.IsZero() {
			return 5 * time.Minute
		}
		return min(time.Until(deadline), 5*time.Minute)
	}
	c := cf.client()
	t, err := c.SubmitTurn(ctx, body, *session, *key, max(left(), time.Millisecond))
	if err != nil {
		return reportError(e, cf.url, err)
	}
	announced := false
	for !t.Completed() {
		if t.State == "pending_approval" && !announced {
			fmt.Fprintf(e.stderr, "sandboxd turn: batch %s waits for an approval: GET %s/v1/approvals lists the pending ones, "+
				"POST %s/v1/approvals/{id} -d '{\"decision\":\"approve\"}' (or \"deny\") decides one, as does the console (%s/#/approvals)\n", t.ID, cf.url, cf.url, cf.url)
			announced = true
		}
		l := left()
		if l <= 0 {
			fmt.Fprintf(e.stderr, "sandboxd turn: batch %s still %s after %s\n", t.ID, t.State, *wait)
			return exitUnreachable
		}
		if t, err = c.GetTurn(ctx, t.ID, l); err != nil {
			return reportError(e, cf.url, err)
		}
	}
	switch {
	case *output == "json":
		var buf bytes.Buffer
		_ = json.Indent(&buf, t.Raw, "", "  ")
		fmt.Fprintln(e.stdout, buf.String())
	case t.Text != nil:
		if t.Final != nil {
			fmt.Fprintf(e.stdout, "Final Answer: %s\n", *t.Final)
		} else {
			fmt.Fprintln(e.stdout, *t.Text)
		}
	default:
		data, _ := json.MarshalIndent(t.Messages, "", "  ")
		fmt.Fprintln(e.stdout, string(data))
	}
	return exitOK
}
