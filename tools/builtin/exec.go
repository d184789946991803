package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// maxArgBytes is Linux's MAX_ARG_STRLEN less the terminating NUL: a longer
// single argv string makes execve fail with E2BIG.
const maxArgBytes = 128<<10 - 1

// pythonWrapper runs the code read from stdin notebook-style: every statement
// runs, and when the last one is an expression its repr() is printed unless
// it is None. A traceback (without the wrapper's own frame) goes to stderr
// and the exit status is 1; SystemExit keeps the code's own status.
//
// The interpreter runs with -I (isolated: PYTHON* variables, the user site
// and the script directory are ignored), so the wrapper's own imports cannot
// be shadowed by files in the workspace. After they are loaded it puts the
// working directory first on sys.path, as a notebook does, so the code can
// import its own modules.
//
// Start-up cost matters (a call is often just print(1)): the wrapper parses
// with the built-in compile() and the C module _ast rather than importing
// ast (~9 ms), and imports traceback and linecache only when it must print a
// traceback. The interpreter starts without site (-S); the wrapper sets
// the builtins site would (exit, quit, help ...) and puts the site
// directories (the image's numpy, pandas, matplotlib) on sys.path at the
// first import the standard library does not satisfy, so a cell sees the
// same modules as in a session's interpreter (which starts with site)
// and one that imports none does not pay for reading every .pth file.
const pythonWrapper = `import _ast, os, sys, site
class _Site:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None:
            return None
        sys.meta_path.remove(cls)
        site.main()
        import importlib.machinery
        return importlib.machinery.PathFinder.find_spec(name)
def _run():
    src = sys.stdin.buffer.read().decode("utf-8", "replace")
    sys.stdin = open(os.devnull)
    sys.path.insert(0, os.getcwd())
    site.setquit(); site.setcopyright(); site.sethelper()
    sys.meta_path.append(_Site)
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    def tb(e, frames):
        import linecache, traceback
        linecache.cache["<cell>"] = (len(src), None, src.splitlines(True), "<cell>")
        traceback.print_exception(type(e), e, frames)
        sys.exit(1)
    try:
        tree = compile(src, "<cell>", "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec", dont_inherit=True), g)
        if last is not None:
            v = eval(compile(last, "<cell>", "eval", dont_inherit=True), g)
            if v is not None:
                print(repr(v))
    except SystemExit:
        raise
    except SyntaxError as e:
        tb(e, None)
    except BaseException as e:
        tb(e, e.__traceback__.tb_next)
_run()
`

// sandboxEnv is the whole environment of sandboxed commands; nothing of the
// daemon's environment leaks in.
func sandboxEnv() []string {
	return []string{
		"PYTHONUNBUFFERED=1",
		"PYTHONDONTWRITEBYTECODE=1",
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"PATH=/usr/local/bin:/usr/bin:/bin",
	}
}

// execTimeout turns timeout_seconds into a Command timeout: 0 when absent
// (the job's timeout applies), else exactly what the call asks. The job
// service holds it to the operator's ceiling before the job is queued (a
// call above it is a 400 naming the ceiling): nothing is clipped here.
func execTimeout(args map[string]any) time.Duration {
	f, ok := argFloat(args, "timeout_seconds")
	if !ok || f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// timeoutProp describes timeout_seconds with the server's default and
// ceiling (Options), which a model plans from.
func timeoutProp(o Options) map[string]any {
	return map[string]any{
		"type":    "number",
		"minimum": 1,
		"description": fmt.Sprintf("Wall-clock limit in seconds; the process is killed when it runs longer. "+
			"Default %g (the server's default); at most %g (the server's ceiling: more is refused).",
			o.DefaultExecTimeout.Seconds(), o.MaxExecTimeout.Seconds()),
	}
}

func mustSchema(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("builtin: bad schema: %v", err))
	}
	return b
}

// objectSchema is a closed object schema.
func objectSchema(props map[string]any, required ...string) json.RawMessage {
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return mustSchema(s)
}

// pythonDescribe is python_repl's description where its calls run (see
// tools.Where); its zero Where gives the description true everywhere.
func pythonDescribe(w tools.Where) string {
	var b strings.Builder
	b.WriteString("Run Python 3 code in the job's sandbox, with /workspace as the working directory. " +
		"All statements run; if the last statement is an expression its repr() is printed (unless None), as in a notebook. " +
		"An uncaught exception fails the call: its traceback is in the output (after [stderr]) and the error names the exception. ")
	if w.Session {
		b.WriteString("This session keeps one interpreter: variables, functions and imports of earlier calls persist, " +
			"and so do files under /workspace; open matplotlib figures come back as PNG images (to the program, not to you). ")
	} else if w.OneShot {
		b.WriteString("Each call starts a fresh interpreter in a fresh sandbox: nothing, not even files under /workspace, " +
			"persists from an earlier call (do everything a step needs in one call, or ask for a session). ")
	} else {
		b.WriteString("In a session, calls share one interpreter: variables, imports and files persist between calls, " +
			"and open matplotlib figures come back as PNG images; outside a session each call starts a fresh interpreter " +
			"in a fresh sandbox, and nothing persists. ")
	}
	switch f := w.Image; {
	case f == nil:
		b.WriteString("Only the standard library is guaranteed to be present.")
	case f.Python == "":
		b.WriteString("Python could not be found in this sandbox's image.")
	default:
		fmt.Fprintf(&b, "Python %s with the standard library", f.Python)
		if pk := f.PackageList(); pk != "" {
			b.WriteString(" and " + pk)
		}
		b.WriteString(".")
		if len(f.Missing) > 0 {
			b.WriteString(" Not installed: " + strings.Join(f.Missing, ", ") + ".")
		}
	}
	return b.String()
}

func pythonTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name:        "python_repl",
		Description: pythonDescribe(tools.Where{}),
		Describe:    pythonDescribe,
		InputSchema: objectSchema(map[string]any{
			"code": map[string]any{
				"type":        "string",
				"minLength":   1,
				"maxLength":   1_000_000,
				"description": "Python 3 source code to run.",
			},
			"timeout_seconds": timeoutProp(o),
		}, "code"),
		Effects:      []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite},
		ParallelSafe: true,
		Command: func(args map[string]any) (tools.Command, error) {
			code, ok := args["code"].(string)
			if !ok || code == "" {
				return tools.Command{}, errors.New("python_repl: code is required")
			}
			return tools.Command{
				// -u: PYTHONUNBUFFERED is ignored under -I, so ask for
				// unbuffered output on the command line too.
				Args:    []string{o.PythonPath, "-I", "-S", "-B", "-u", "-c", pythonWrapper},
				Stdin:   []byte(code),
				Env:     sandboxEnv(),
				Dir:     o.WorkDir,
				Timeout: execTimeout(args),
				Decode:  decodePython,
			}, nil
		},
	}
}

func bashTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "bash",
		Description: "Run a bash command line in the job's sandbox, with /workspace as the working directory " +
			"(no profile or rc files are read). Returns stdout, stderr and the exit status; a non-zero exit is reported, not an error of the tool. " +
			"The command line is limited to 128 KiB; write longer scripts to a file first.",
		InputSchema: objectSchema(map[string]any{
			"command": map[string]any{
				"type":        "string",
				"minLength":   1,
				"maxLength":   maxArgBytes,
				"description": "The bash command line, run with bash -c.",
			},
			"timeout_seconds": timeoutProp(o),
		}, "command"),
		Effects:      []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite},
		ParallelSafe: true,
		Command: func(args map[string]any) (tools.Command, error) {
			cmd, ok := args["command"].(string)
			if !ok || cmd == "" {
				return tools.Command{}, errors.New("bash: command is required")
			}
			if len(cmd) > maxArgBytes {
				return tools.Command{}, fmt.Errorf("bash: command is %d bytes, more than the %d an argument may hold; write it to a file and run that", len(cmd), maxArgBytes)
			}
			return tools.Command{
				Args:    []string{o.BashPath, "--noprofile", "--norc", "-c", cmd},
				Env:     sandboxEnv(),
				Dir:     o.WorkDir,
				Timeout: execTimeout(args),
			}, nil
		},
	}
}
