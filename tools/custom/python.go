package custom

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Sandbox runs one command to completion in a fresh sandbox with the
// given effects (job.Service.RunCommand). A Python function tool's schema
// is derived there: sandboxd never imports the file.
type Sandbox interface {
	RunCommand(ctx context.Context, cmd tools.Command, effects []tools.Effect, image string) (tools.Result, error)
}

var (
	//go:embed derive.py
	deriveScript string
	//go:embed call.py
	callScript string
)

// deriveTimeout bounds deriving one file's schema.
const deriveTimeout = 30 * time.Second

// derived is what derive.py answers.
type derived struct {
	Name               string          `json:"name"`
	Description        string          `json:"description"`
	InputSchema        json.RawMessage `json:"input_schema"`
	ContentAndArtifact bool            `json:"content_and_artifact"`
	Effects            []tools.Effect  `json:"effects"`
	ParallelSafe       *bool           `json:"parallel_safe"`
	Idempotent         bool            `json:"idempotent"`
	ReturnDirect       bool            `json:"return_direct"`
	ResultAsAnswer     bool            `json:"result_as_answer"`
	Timeout            float64         `json:"timeout"`
	Image              string          `json:"image"`
	Error              string          `json:"error"`
}

// parsePython derives the tool of a Python file in a sandbox.
//
// Module-level settings (literals) tune it: effects (default [exec]; exec
// is always added: the function runs in a sandbox), parallel_safe (default
// true), idempotent, return_direct (or result_as_answer: the result is the
// agent's final answer), timeout (seconds), image, and response_format =
// "content_and_artifact" (also implied by a tuple[str, X] return hint),
// which splits a returned (content, artifact) pair like LangChain does:
// the content goes to the model, the artifact is stored apart.
func parsePython(ctx context.Context, sb Sandbox, python, path string, src []byte) (*tools.Tool, error) {
	if sb == nil {
		return nil, errors.New("no sandbox runner to derive the schema in")
	}
	dctx, cancel := context.WithTimeout(ctx, deriveTimeout)
	defer cancel()
	res, err := sb.RunCommand(dctx, tools.Command{
		Args: []string{python, "-I", "-S", "-B", "-c", deriveScript}, Stdin: src,
		Env: sandboxEnv(nil), Timeout: deriveTimeout,
	}, []tools.Effect{tools.EffectExec}, "")
	if err != nil {
		return nil, fmt.Errorf("deriving the schema in a sandbox: %w", err)
	}
	var d derived
	if res.Process == nil || json.Unmarshal([]byte(strings.TrimSpace(res.Process.Stdout)), &d) != nil {
		msg := res.Error
		if res.Process != nil && res.Process.Stderr != "" {
			msg += ": " + lastLine(res.Process.Stderr)
		}
		return nil, fmt.Errorf("deriving the schema failed: %s", msg)
	}
	if d.Error != "" {
		return nil, errors.New(d.Error)
	}
	effects := d.Effects
	if !slices.Contains(effects, tools.EffectExec) {
		effects = append([]tools.Effect{tools.EffectExec}, effects...)
	}
	file := "/tools/" + filepath.Base(path)
	t := &tools.Tool{
		Name: d.Name, Description: d.Description, InputSchema: d.InputSchema, Effects: effects,
		ParallelSafe: d.ParallelSafe == nil || *d.ParallelSafe, Idempotent: d.Idempotent,
		ReturnDirect: d.ReturnDirect || d.ResultAsAnswer,
		Image:        d.Image, Source: "file:" + path,
	}
	if d.Timeout > 0 {
		t.Limits.Timeout = time.Duration(d.Timeout * float64(time.Second))
	}
	source, fn, split := string(src), d.Name, d.ContentAndArtifact
	t.Command = func(args map[string]any) (tools.Command, error) {
		in, err := json.Marshal(map[string]any{
			"source": source, "file": file, "function": fn, "arguments": args, "content_and_artifact": split,
		})
		if err != nil {
			return tools.Command{}, err
		}
		return tools.Command{
			Args:  []string{python, "-I", "-B", "-u", "-c", callScript},
			Stdin: in, Env: sandboxEnv(nil), Decode: decodePython, // the timeout is Tool.Limits'.
		}, nil
	}
	return t, nil
}

// decodePython reads call.py's envelope; without one (the interpreter
// died) the process's own failure stands.
func decodePython(r tools.Result) tools.Result {
	if r.Process == nil {
		return r
	}
	var a scriptAnswer
	if json.Unmarshal([]byte(strings.TrimSpace(r.Process.Stdout)), &a) != nil || (a.OK == nil && a.Error == "") {
		return r
	}
	return applyAnswer(r, a)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
