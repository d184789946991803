package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/api/client"
	"github.com/sandboxd/sandboxd/job"
)

const defaultURL = "http://127.0.0.1:8080"

// clientFlags are the flags every client command takes.
type clientFlags struct {
	url, apiKey string
}

func (c *clientFlags) register(fs *flag.FlagSet, e env) {
	def := e.getenv("SANDBOXD_URL")
	if def == "" {
		def = defaultURL
	}
	fs.StringVar(&c.url, "url", def, "server URL (env SANDBOXD_URL)")
	fs.StringVar(&c.apiKey, "api-key", e.getenv("SANDBOXD_API_KEY"), "API key (env SANDBOXD_API_KEY)")
}

func (c *clientFlags) client() *client.Client {
	return client.New(c.url, c.apiKey, &http.Client{})
}

// optString is a string flag that remembers whether it was set.
type optString struct {
	v   string
	set bool
}

func (o *optString) String() string     { return o.v }
func (o *optString) Set(s string) error { o.v, o.set = s, true; return nil }

// kvList collects repeated --arg KEY=VALUE flags.
type kvList []string

func (k *kvList) String() string { return strings.Join(*k, ",") }
func (k *kvList) Set(s string) error {
	if key, _, ok := strings.Cut(s, "="); !ok || key == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	*k = append(*k, s)
	return nil
}

// parseInterleaved parses flags that may come before or after positional
// arguments ("run TOOL --code x" and "run --code x TOOL").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// convenienceFlags map to tool arguments of the same name.
var convenienceFlags = []struct{ name, help string }{
	{"code", "code to run (python_repl)"},
	{"command", "shell command (bash)"},
	{"expression", "expression (calculator)"},
	{"path", "file path (file tools)"},
}

func cmdRun(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fs, e)
	jsonArgs := fs.String("json", "", "tool arguments as a JSON object (other argument flags are merged into it)")
	conv := map[string]*optString{}
	for _, f := range convenienceFlags {
		conv[f.name] = &optString{}
		fs.Var(conv[f.name], f.name, f.help)
	}
	var kvs kvList
	fs.Var(&kvs, "arg", "KEY=VALUE tool argument (VALUE is JSON if it parses, else a string); repeatable")
	wait := fs.Duration("wait", 10*time.Minute, "how long to wait for the result (0: no limit)")
	output := fs.String("output", "text", "text (the tool's content) or json (the whole job)")
	session := fs.String("session", "", "run in this session (see sandboxd session create)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: sandboxd run TOOL [flags]\n\nRuns one tool call, waits for it and prints its content.\nExit status: 0 ok, 1 the tool failed, 2 usage error, 3 server unreachable or error.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, code, ok := parseInterleaved(fs, args)
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "sandboxd run: "+format+"\n", a...)
		return exitUsage
	}
	if len(pos) != 1 {
		return usageErr("want exactly one TOOL, got %d arguments (see sandboxd help run)", len(pos))
	}
	if *output != "text" && *output != "json" {
		return usageErr("--output %q: want text or json", *output)
	}
	if *wait < 0 {
		return usageErr("--wait %s: must not be negative", *wait)
	}
	arguments := map[string]json.RawMessage{}
	if *jsonArgs != "" {
		if err := json.Unmarshal([]byte(*jsonArgs), &arguments); err != nil || arguments == nil {
			return usageErr("--json %q: not a JSON object", *jsonArgs)
		}
	}
	for _, f := range convenienceFlags {
		if o := conv[f.name]; o.set {
			arguments[f.name], _ = json.Marshal(o.v)
		}
	}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if json.Valid([]byte(v)) {
			arguments[k] = json.RawMessage(v)
		} else {
			arguments[k], _ = json.Marshal(v)
		}
	}
	argJSON, _ := json.Marshal(arguments)

	// The server holds each request up to the time left (long polls of at
	// most 5 minutes); ctx only guards against a server that stops answering.
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
	// A wait returns when the job is terminal: until the job runs (or its
	// approval is announced) polls are short, so that a job held for a
	// human's approval is said at once, not after the whole wait.
	short := func(l time.Duration) time.Duration { return min(l, approvalPoll) }
	announced := false
	c := cf.client()
	j, err := c.Submit(ctx, client.SubmitRequest{Tool: pos[0], Arguments: argJSON, SessionID: *session}, max(short(left()), time.Millisecond))
	if err != nil {
		return reportError(e, cf.url, err)
	}
	for !j.State.Terminal() {
		if j.State == job.StatePendingApproval && !announced {
			announceApproval(e, cf.url, j)
			announced = true
		}
		l := left()
		if l <= 0 {
			fmt.Fprintf(e.stderr, "sandboxd run: job %s still %s after %s\n", j.ID, j.State, *wait)
			return exitUnreachable
		}
		if !announced && (j.State == job.StateQueued || j.State == job.StatePendingApproval) {
			l = short(l)
		}
		if j, err = c.Get(ctx, j.ID, l); err != nil {
			return reportError(e, cf.url, err)
		}
	}
	return printJob(e, j, *output)
}

// approvalPoll bounds a poll of a job that has not started: a job may be
// held for approval (announced at once).
const approvalPoll = 2 * time.Second

// announceApproval tells the person at the terminal that the job waits
// for a human's decision, which approval, and how to decide it.
func announceApproval(e env, url string, j *job.Job) {
	id, why := "", ""
	if g := j.Guard; g != nil {
		id, why = g.ApprovalID, g.Reason
	}
	if id == "" {
		fmt.Fprintf(e.stderr, "sandboxd run: job %s waits for an approval (GET %s/v1/approvals lists the pending ones)\n", j.ID, url)
		return
	}
	if why != "" {
		why = " (" + why + ")"
	}
	fmt.Fprintf(e.stderr, "sandboxd run: job %s waits for approval %s%s; decide it with\n"+
		"  curl -X POST %s/v1/approvals/%s -d '{\"decision\":\"approve\"}'   # or \"deny\", with a \"reason\"\n"+
		"or on the console's approvals page (%s/#/approvals)\n", j.ID, id, why, url, id, url)
}

// printJob prints the result and returns 0 when the tool succeeded, else 1.
func printJob(e env, j *job.Job, output string) int {
	failed := j.State != job.StateSucceeded || j.Result == nil || !j.Result.OK
	if output == "json" {
		data, _ := client.MarshalJob(j)
		fmt.Fprintf(e.stdout, "%s\n", data)
	} else if r := j.Result; r != nil {
		if r.Content != "" {
			fmt.Fprint(e.stdout, r.Content)
			if !strings.HasSuffix(r.Content, "\n") {
				fmt.Fprintln(e.stdout)
			}
		}
		if r.Process != nil && r.Process.Stderr != "" && !strings.Contains(r.Content, r.Process.Stderr) {
			fmt.Fprint(e.stderr, r.Process.Stderr)
			if !strings.HasSuffix(r.Process.Stderr, "\n") {
				fmt.Fprintln(e.stderr)
			}
		}
		if r.Error != "" {
			fmt.Fprintf(e.stderr, "error: %s\n", r.Error)
		}
	}
	if failed && output == "text" && (j.Result == nil || j.Result.Error == "") {
		reason := j.Reason
		if reason == "" {
			reason = "no result"
		}
		fmt.Fprintf(e.stderr, "sandboxd run: job %s %s (%s)\n", j.ID, j.State, reason)
	}
	if failed {
		return exitToolFailed
	}
	return exitOK
}

// reportError prints a server or transport error and returns 3.
func reportError(e env, url string, err error) int {
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		fmt.Fprintf(e.stderr, "sandboxd: server error: %s (HTTP %d): %s\n", ae.Code, ae.Status, ae.Message)
		for _, p := range ae.Details {
			fmt.Fprintf(e.stderr, "  %s: %s\n", p.Field, p.Message)
		}
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(e.stderr, "sandboxd: no answer from %s in time: %v\n", url, err)
	default:
		fmt.Fprintf(e.stderr, "sandboxd: cannot reach the server at %s: %v\n", url, err)
	}
	return exitUnreachable
}

func cmdTools(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fs, e)
	format := fs.String("format", "", "print JSON: json (sandboxd's shape), openai, anthropic or mcp; default a table")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: sandboxd tools [flags]\n\nLists the server's tools.\n\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "sandboxd tools: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	apiFormat := *format
	switch *format {
	case "", "json":
		apiFormat = ""
	case "openai", "anthropic", "mcp":
	default:
		fmt.Fprintf(e.stderr, "sandboxd tools: --format %q: want json, openai, anthropic or mcp\n", *format)
		return exitUsage
	}
	list, err := cf.client().Tools(ctx, apiFormat)
	if err != nil {
		return reportError(e, cf.url, err)
	}
	if *format != "" {
		data, _ := json.MarshalIndent(list, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", data)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tEFFECTS\tDESCRIPTION")
	for _, raw := range list {
		var t struct {
			Name        string   `json:"name"`
			Description string   `json:"description"`
			Effects     []string `json:"effects"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		effects := strings.Join(t.Effects, ",")
		if effects == "" {
			effects = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, effects, summary(t.Description, 80))
	}
	_ = tw.Flush()
	return exitOK
}

// summary is the first line of s, cut to n runes.
func summary(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
