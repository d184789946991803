package builtin

import (
	"strings"

	"github.com/sandboxd/sandboxd/tools"
)

// The result of a python_repl call is one shape on every runner, one-shot
// or in a session (the job service builds a session cell's ProcessInfo as
// the one-shot interpreter's would be and passes it through the same
// decodePython):
//
//   - content: what the model reads. The cell's stdout; the repr() of a
//     trailing expression that is not None on a line of its own, as
//     print() would write it (so "6*7" gives "42\n"); then, when not
//     empty, stderr under tools.StderrLabel, which holds the traceback of
//     an uncaught exception.
//   - ok: the cell ran to its end: no uncaught exception, no non-zero
//     sys.exit, no timeout, no kill.
//   - error: "" when ok, else one line: "the code raised
//     ZeroDivisionError: division by zero" for an uncaught exception (its
//     traceback is in content), "process exited with code 3" for
//     sys.exit(3), "timed out after 3s", "killed: out of memory ...". In a
//     session also why the interpreter is gone when it died.
//   - process: exit_code is the cell's status as the interpreter's exit
//     status would be (0; 1 after an uncaught exception; sys.exit's code),
//     with timed_out, oom_killed, signal, stdout and stderr. In a session
//     the interpreter lives on: exit_code is still the cell's. A cell that
//     timed out has timed_out set and what it printed until then; its
//     exit_code and signal are the killed process's one-shot (137,
//     SIGKILL) and 0 in a session, whose interpreter was interrupted and
//     keeps its globals.
//   - The trailing expression's value is in content only: a one-shot
//     interpreter prints it (it has no other channel), a session's is
//     printed the same way.
//   - artifacts: a session's open matplotlib figures as PNG (a one-shot
//     cell saves files under /workspace instead).
//
// bash and the other exec tools have the same content, error and process,
// without the exception line.

// raisedPrefix starts the error of a cell that raised an exception.
const raisedPrefix = "the code raised "

// maxExceptionLine bounds the exception line quoted in error.
const maxExceptionLine = 300

// decodePython is python_repl's Command.Decode: an exit status of 1 after
// a traceback of the cell is an uncaught exception, said so in error with
// the exception's line.
func decodePython(r tools.Result) tools.Result {
	p := r.Process
	if r.OK || p == nil || p.ExitCode != 1 || p.TimedOut || p.OOMKilled || p.Signal != "" {
		return r
	}
	if exc := exceptionLine(p.Stderr); exc != "" {
		r.Error = raisedPrefix + exc
	}
	return r
}

// exceptionLine finds the exception of the last traceback in stderr:
// after the traceback's indented frame lines, the first line at the left
// margin ("ValueError: boom"). "" when stderr ends in no traceback of a
// cell (a message of the code's own before exit(1)).
func exceptionLine(stderr string) string {
	i := strings.LastIndex(stderr, "  File \"<cell")
	if i < 0 {
		return ""
	}
	for _, line := range strings.Split(stderr[i:], "\n") {
		if line == "" || strings.HasPrefix(line, " ") {
			continue
		}
		if len(line) > maxExceptionLine {
			line = strings.ToValidUTF8(line[:maxExceptionLine], "") + " ..."
		}
		return strings.TrimSpace(line)
	}
	return ""
}
