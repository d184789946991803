// Package builtin holds the tools every sandboxd deployment ships: the
// sandboxed python_repl and bash (they describe a Command the job service runs
// through a runner), the in-process workspace file tools (confined with
// os.Root), the calculator and http_request behind its SSRF guard.
//
// Tools returns fresh values on every call, so a caller may change one tool
// (its description, say) without touching another registry's copy.
package builtin

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Options are operator limits. Zero fields take the defaults listed; a
// request may lower a limit through its own arguments, never raise it
// (the exec timeout excepted: see DefaultExecTimeout).
type Options struct {
	// MaxReadBytes caps the text read_file returns and the size of a file
	// str_replace edits. Default 1 MiB.
	MaxReadBytes int64
	// MaxWriteBytes caps the content write_file accepts. Default 10 MiB.
	MaxWriteBytes int64
	// MaxOutputBytes caps the text list_dir, glob_search and grep_search
	// return. Default 256 KiB.
	MaxOutputBytes int
	// MaxEntries is the ceiling of list_dir's max_entries and of
	// glob_search's results. Default 10000.
	MaxEntries int
	// MaxMatches is the ceiling of grep_search's max_matches. Default 5000.
	MaxMatches int
	// MaxWalkEntries stops a recursive walk (list_dir, glob_search,
	// grep_search) after visiting this many entries. Default 200000.
	MaxWalkEntries int
	// MaxGrepFileBytes: grep_search skips larger files. Default 10 MiB.
	MaxGrepFileBytes int64
	// MaxHashBytes: file_info hashes regular files up to this size.
	// Default 64 MiB.
	MaxHashBytes int64
	// DefaultExecTimeout and MaxExecTimeout are the job timeout's default
	// and ceiling (the daemon passes limits.defaults.timeout and
	// limits.ceilings.timeout), told to the model in timeout_seconds'
	// description. The job service enforces them. Defaults 60s and 30m.
	DefaultExecTimeout time.Duration
	MaxExecTimeout     time.Duration
	// PythonPath and BashPath are the interpreters inside the sandbox.
	// Defaults /usr/bin/python3 and /bin/bash.
	PythonPath string
	BashPath   string
	// WorkDir is the working directory of sandboxed commands and the path
	// models see the workspace under; file tools accept paths starting
	// with it. Default /workspace.
	WorkDir string
}

// Defaults.
const (
	DefaultMaxReadBytes     = 1 << 20
	DefaultMaxWriteBytes    = 10 << 20
	DefaultMaxOutputBytes   = 256 << 10
	DefaultMaxEntries       = 10000
	DefaultMaxMatches       = 5000
	DefaultMaxWalkEntries   = 200000
	DefaultMaxGrepFileBytes = 10 << 20
	DefaultMaxHashBytes     = 64 << 20
	DefaultExecTimeout      = 60 * time.Second
	DefaultMaxExecTimeout   = 30 * time.Minute
	DefaultPythonPath       = "/usr/bin/python3"
	DefaultBashPath         = "/bin/bash"
	DefaultWorkDir          = "/workspace"
	defaultListEntries      = 1000
	defaultGrepMatches      = 200
)

func (o Options) withDefaults() Options {
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxMatches <= 0 {
		o.MaxMatches = DefaultMaxMatches
	}
	if o.MaxWalkEntries <= 0 {
		o.MaxWalkEntries = DefaultMaxWalkEntries
	}
	if o.MaxGrepFileBytes <= 0 {
		o.MaxGrepFileBytes = DefaultMaxGrepFileBytes
	}
	if o.MaxHashBytes <= 0 {
		o.MaxHashBytes = DefaultMaxHashBytes
	}
	if o.DefaultExecTimeout <= 0 {
		o.DefaultExecTimeout = DefaultExecTimeout
	}
	if o.MaxExecTimeout <= 0 {
		o.MaxExecTimeout = DefaultMaxExecTimeout
	}
	if o.DefaultExecTimeout > o.MaxExecTimeout {
		o.DefaultExecTimeout = o.MaxExecTimeout
	}
	if o.PythonPath == "" {
		o.PythonPath = DefaultPythonPath
	}
	if o.BashPath == "" {
		o.BashPath = DefaultBashPath
	}
	if o.WorkDir == "" {
		o.WorkDir = DefaultWorkDir
	}
	return o
}

// Tools returns fresh copies of every built-in tool, in a stable order.
func Tools(opts Options) []*tools.Tool {
	o := opts.withDefaults()
	out := []*tools.Tool{
		pythonTool(o),
		bashTool(o),
		readFileTool(o),
		writeFileTool(o),
		listDirTool(o),
		globSearchTool(o),
		grepSearchTool(o),
		fileInfoTool(o),
		strReplaceTool(o),
		calculatorTool(),
		httpRequestTool(nil),
	}
	// Results that only depend on the arguments (calculator) or on the
	// workspace (the read-only file tools) are cacheable.
	for _, t := range out {
		if t.Name == "calculator" || slices.Equal(t.Effects, []tools.Effect{tools.EffectFileRead}) {
			t.Cache = &tools.CachePolicy{}
		}
	}
	return out
}

// Register adds every built-in tool to r, stopping at the first refusal.
func Register(r *tools.Registry, opts Options) error {
	if r == nil {
		return errors.New("register builtin tools: nil registry")
	}
	for _, t := range Tools(opts) {
		if err := r.Register(t); err != nil {
			return fmt.Errorf("register builtin tool %s: %w", t.Name, err)
		}
	}
	return nil
}

// okResult and errResult build the Result of an in-process tool; tool misuse
// (bad path, syntax error, refused address) is a result with OK false, never
// a Go error.
func okResult(start time.Time, content string, effects ...tools.Effect) tools.Result {
	return tools.Result{
		OK:      true,
		Content: content,
		Usage:   tools.Usage{WallMS: time.Since(start).Milliseconds()},
		Effects: effects,
	}
}

func errResult(start time.Time, msg string, effects ...tools.Effect) tools.Result {
	return tools.Result{
		OK:      false,
		Error:   msg,
		Usage:   tools.Usage{WallMS: time.Since(start).Milliseconds()},
		Effects: effects,
	}
}

// Argument accessors. args were validated against the input schema, so a
// wrong type means the caller skipped validation; the accessors then fall
// back to the default rather than panic.

func argString(args map[string]any, key, def string) string {
	if s, ok := args[key].(string); ok {
		return s
	}
	return def
}

func argBool(args map[string]any, key string, def bool) bool {
	if b, ok := args[key].(bool); ok {
		return b
	}
	return def
}

func argFloat(args map[string]any, key string) (float64, bool) {
	switch v := args[key].(type) {
	case float64:
		return v, true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// argInt reads an integer argument and clamps it into [lo, hi].
func argInt(args map[string]any, key string, def, lo, hi int) int {
	f, ok := argFloat(args, key)
	if !ok {
		return def
	}
	switch {
	case f < float64(lo):
		return lo
	case f > float64(hi):
		return hi
	}
	return int(f)
}
