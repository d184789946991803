// Package custom makes tools from files, without Go code: a YAML file
// describes a tool that runs an argv template or a script in a sandbox,
// and a Python file defining one function becomes a tool whose schema is
// derived from the function's signature inside a sandbox (never by
// importing the file into sandboxd). Directory loads a tools directory
// into a registry, file by file: a bad file is reported with its path and
// the problem while the others load, and Reload reads it again.
package custom

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/tools"
)

// fileSpec is a YAML tool file.
type fileSpec struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	InputSchema map[string]any `yaml:"input_schema"`
	// Effects default to [exec]: the tool runs a process in a sandbox.
	Effects []tools.Effect `yaml:"effects"`
	// ParallelSafe defaults to true: every call outside a session gets a
	// fresh sandbox (see tools.Tool.ParallelSafe).
	ParallelSafe *bool `yaml:"parallel_safe"`
	Idempotent   bool  `yaml:"idempotent"`
	// ReturnDirect (or its CrewAI name result_as_answer): the tool's
	// result is the agent's final answer (tools.Tool.ReturnDirect).
	ReturnDirect   bool       `yaml:"return_direct"`
	ResultAsAnswer bool       `yaml:"result_as_answer"`
	Image          string     `yaml:"image"`
	Limits         limitsSpec `yaml:"limits"`
	// Exactly one of Argv and Script.
	Argv []string `yaml:"argv"`
	// Script is a file (relative to the YAML file's directory, inside the
	// tools directory) run with the arguments as JSON on stdin.
	Script string `yaml:"script"`
	// Interpreter runs the script: [program, flag] as in
	// ["/usr/bin/python3", "-c"], the script's text then being the next
	// argument. Default: from the script's #! line.
	Interpreter []string          `yaml:"interpreter"`
	Env         map[string]string `yaml:"env"`
}

type limitsSpec struct {
	MemoryBytes int64  `yaml:"memory_bytes"`
	PIDs        int64  `yaml:"pids"`
	CPUMillis   int64  `yaml:"cpu_millis"`
	Timeout     string `yaml:"timeout"`
	OutputBytes int64  `yaml:"output_bytes"`
}

func (l limitsSpec) limits() (tools.Limits, error) {
	out := tools.Limits{MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis, OutputBytes: l.OutputBytes}
	if l.MemoryBytes < 0 || l.PIDs < 0 || l.CPUMillis < 0 || l.OutputBytes < 0 {
		return out, errors.New("limits must not be negative")
	}
	if l.Timeout != "" {
		d, err := time.ParseDuration(l.Timeout)
		if err != nil || d <= 0 {
			return out, fmt.Errorf("limits.timeout %q: want a positive duration like 30s", l.Timeout)
		}
		out.Timeout = d
	}
	return out, nil
}

// maxScriptBytes: a script travels as one argv element (MAX_ARG_STRLEN).
const maxScriptBytes = 128<<10 - 1

// sandboxEnv is the environment of custom tools' processes (nothing of the
// daemon's leaks in).
func sandboxEnv(extra map[string]string) []string {
	env := []string{"HOME=/tmp", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseYAML reads a YAML tool file; root is the tools directory (a script
// must be inside it). It returns the tool and the script file it uses.
func parseYAML(path, root string, data []byte) (*tools.Tool, string, error) {
	var fs fileSpec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fs); err != nil {
		return nil, "", fmt.Errorf("YAML: %w", err)
	}
	if fs.Name == "" {
		return nil, "", errors.New("name: missing")
	}
	if strings.TrimSpace(fs.Description) == "" {
		return nil, "", errors.New("description: missing (the model reads it to choose the tool)")
	}
	effects := fs.Effects
	if len(effects) == 0 {
		effects = []tools.Effect{tools.EffectExec}
	}
	limits, err := fs.Limits.limits()
	if err != nil {
		return nil, "", err
	}
	for k := range fs.Env {
		if !envName.MatchString(k) {
			return nil, "", fmt.Errorf("env: %q is not a variable name", k)
		}
	}
	var schema json.RawMessage
	if fs.InputSchema != nil {
		if schema, err = json.Marshal(fs.InputSchema); err != nil {
			return nil, "", fmt.Errorf("input_schema: %w", err)
		}
	}
	t := &tools.Tool{
		Name: fs.Name, Description: strings.TrimSpace(fs.Description), InputSchema: schema, Effects: effects,
		ParallelSafe: fs.ParallelSafe == nil || *fs.ParallelSafe, Idempotent: fs.Idempotent,
		ReturnDirect: fs.ReturnDirect || fs.ResultAsAnswer,
		Image:        fs.Image, Limits: limits, Source: "file:" + path,
	}
	env := sandboxEnv(fs.Env)
	switch {
	case len(fs.Argv) > 0 && fs.Script != "":
		return nil, "", errors.New("set argv or script, not both")
	case len(fs.Argv) > 0:
		tmpl, err := parseArgv(fs.Argv, propertyNames(fs.InputSchema))
		if err != nil {
			return nil, "", err
		}
		t.Command = func(args map[string]any) (tools.Command, error) {
			argv, err := tmpl.expand(args)
			if err != nil {
				return tools.Command{}, err
			}
			return tools.Command{Args: argv, Env: env}, nil // limits.Timeout is the job's (Tool.Limits)
		}
		return t, "", nil
	case fs.Script != "":
		script, err := scriptPath(path, root, fs.Script)
		if err != nil {
			return nil, "", err
		}
		src, err := os.ReadFile(script)
		if err != nil {
			return nil, "", fmt.Errorf("script: %w", err)
		}
		if len(src) > maxScriptBytes {
			return nil, "", fmt.Errorf("script %s is %d bytes; at most %d (it is passed as one argument)", fs.Script, len(src), maxScriptBytes)
		}
		interp, err := interpreter(fs.Interpreter, src)
		if err != nil {
			return nil, "", fmt.Errorf("script %s: %w", fs.Script, err)
		}
		argv := append(interp, string(src))
		t.Command = func(args map[string]any) (tools.Command, error) {
			in, err := json.Marshal(args)
			if err != nil {
				return tools.Command{}, err
			}
			return tools.Command{Args: argv, Stdin: in, Env: env, Decode: decodeScript}, nil
		}
		return t, script, nil
	default:
		return nil, "", errors.New("set argv (a command template) or script (a file run with the arguments as JSON on stdin)")
	}
}

// scriptPath resolves a script relative to the YAML file, inside root.
func scriptPath(yamlPath, root, script string) (string, error) {
	p := script
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(yamlPath), p)
	}
	p = filepath.Clean(p)
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("script %q is outside the tools directory", script)
	}
	return p, nil
}

// interpreter is the argv prefix that runs a script's text: the YAML's
// interpreter, or the #! line's program with the flag that takes a
// program text (-c for Python and shells, -e for Perl, Ruby and Node).
func interpreter(explicit []string, src []byte) ([]string, error) {
	if len(explicit) > 0 {
		return append([]string(nil), explicit...), nil
	}
	line, _, _ := bytes.Cut(src, []byte("\n"))
	if !bytes.HasPrefix(line, []byte("#!")) {
		return nil, errors.New("no #! line: set interpreter, e.g. [/usr/bin/python3, -c]")
	}
	fields := strings.Fields(string(line[2:]))
	if len(fields) == 0 {
		return nil, errors.New("empty #! line")
	}
	prog := fields[0]
	if filepath.Base(prog) == "env" && len(fields) > 1 {
		prog = fields[1]
		if !strings.Contains(prog, "/") {
			prog = "/usr/bin/" + prog
		}
	}
	base := filepath.Base(prog)
	switch {
	case strings.HasPrefix(base, "python"), base == "bash", base == "sh", base == "dash", base == "zsh":
		return []string{prog, "-c"}, nil
	case strings.HasPrefix(base, "perl"), base == "ruby", base == "node":
		return []string{prog, "-e"}, nil
	}
	return nil, fmt.Errorf("cannot tell how %s runs a program text: set interpreter, e.g. [%s, -c]", prog, prog)
}

func propertyNames(schema map[string]any) map[string]bool {
	out := map[string]bool{}
	props, _ := schema["properties"].(map[string]any)
	for k := range props {
		out[k] = true
	}
	return out
}

// scriptAnswer is what a script or a Python function tool may print as
// its result.
type scriptAnswer struct {
	OK        *bool            `json:"ok"`
	Content   *json.RawMessage `json:"content"`
	Error     string           `json:"error"`
	Traceback string           `json:"traceback"`
	Artifacts []struct {
		Name     string `json:"name"`
		MimeType string `json:"mime_type"`
		Data     string `json:"data"` // base64
		Text     string `json:"text"`
	} `json:"artifacts"`
}

// decodeScript turns a script's stdout into the result: a JSON object with
// ok, content, error (and artifacts) is taken as the answer; anything else
// is plain text content. A non-zero exit stays a failure.
func decodeScript(r tools.Result) tools.Result {
	if r.Process == nil {
		return r
	}
	out := strings.TrimSpace(r.Process.Stdout)
	var a scriptAnswer
	if !strings.HasPrefix(out, "{") || json.Unmarshal([]byte(out), &a) != nil || (a.OK == nil && a.Content == nil && a.Error == "" && len(a.Artifacts) == 0) {
		if r.OK {
			r.Content = r.Process.Stdout // stderr stays in Process, out of the model's text
		}
		return r
	}
	return applyAnswer(r, a)
}

func applyAnswer(r tools.Result, a scriptAnswer) tools.Result {
	content := ""
	if a.Content != nil {
		var s string
		if json.Unmarshal(*a.Content, &s) == nil {
			content = s
		} else {
			content = string(*a.Content)
		}
	}
	ok := a.Error == ""
	if a.OK != nil {
		ok = *a.OK
	}
	if r.OK { // the process succeeded: its answer decides
		r.OK, r.Content, r.Error = ok, content, a.Error
		if !ok && r.Error == "" {
			r.Error = "the tool reported a failure"
		}
	} else {
		if a.Error != "" {
			r.Error = a.Error + " (" + r.Error + ")"
		}
		r.Content = content
	}
	if a.Traceback != "" && !r.OK {
		r.Content = strings.TrimRight(a.Traceback, "\n")
	}
	for i, x := range a.Artifacts {
		var data []byte
		if x.Text != "" {
			data = []byte(x.Text)
		} else if b, err := base64.StdEncoding.DecodeString(x.Data); err == nil {
			data = b
		} else {
			continue
		}
		mime := x.MimeType
		if mime == "" {
			mime = http.DetectContentType(data)
		}
		name := x.Name
		if name == "" {
			name = "artifact-" + strconv.Itoa(i+1)
		}
		r.Artifacts = append(r.Artifacts, tools.Artifact{Name: name, MimeType: mime, Size: int64(len(data)), Data: data})
	}
	return r
}
