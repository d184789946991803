// Package agent is the wire protocol between sandboxd and the in-sandbox
// agent (cmd/sandbox-agent): the Client half that runners hand out as
// Sandbox.Agent(), and the server half (Serve, ServeConn).
//
// # Framing
//
// Every message is a frame: a 4-byte big-endian length, then that many
// bytes of JSON (one object, see frame in frame.go). A length of 0 or
// over MaxFrameSize (8 MiB), bytes that are not JSON, or a frame without
// a type end the connection: the peer is broken or hostile. Byte fields
// ([]byte) travel as base64, so results are clamped well below the frame
// size (MaxOutputLimit per stream, MaxReadFileBytes per file).
//
// # Messages
//
// Requests carry a client-chosen non-zero id; any number may be in flight
// on one connection (MaxInFlight). The agent answers each with exactly one
// "result" or "error" frame with the same id, preceded by any number of
// "output" frames (stream "stdout"|"stderr", data) for exec and repl.
//
//	ping                           → result
//	exec       exec{args,env,dir,stdin,timeout,output_limit} → output*, result{exec_result}
//	prestart   exec{args,env,dir,output_limit}               → result once started (no exec: drop the held one)
//	repl_warm                      → result once the REPL's interpreter runs
//	repl       repl{code,timeout,output_limit}               → output*, result{repl_result}
//	cancel     target=<id>         → result once the target has ended (or at once if unknown)
//	read_file  path, max_bytes     → result{data}
//	write_file path, data, mode    → result (parents created, mkdir -p)
//	list_dir   path                → result{files}
//	stat       path                → result{info} (lstat)
//	remove     path, recursive     → result
//	shutdown                       → result, then the agent kills everything and exits
//
// An unknown type, a missing or duplicate id, or a failed operation is
// answered with an "error" frame and the connection stays usable. A client
// sending a response type (output/result/error) is a protocol violation.
//
// Exit codes, signals, timeouts, Python exceptions and interpreter
// restarts are results; "error" is for requests that could not be carried
// out at all. File paths are relative to the agent's root (or absolute
// inside it) and confined with os.Root: ".." and symlinks that leave the
// root are refused.
//
// # Client guarantees
//
// The client treats every frame as untrusted: garbage closes the
// connection and fails pending calls with ErrClosed, no call outlives its
// ctx, exec and repl additionally give up ErrNoResponse after their own
// timeout plus a grace period, and streamed output handed to onOutput is
// capped at the request's output limit per stream.
//
// # Prestart
//
// prestart starts a process ahead of its exec and holds it (one at a time
// per agent) blocked on its stdin pipe: the pool of one-shot sandboxes
// starts python_repl's interpreter this way, so the job's exec only
// writes the code. The next exec with the same args, env, dir and output
// limit and a non-empty stdin takes it (its timeout and duration count
// from then); any other exec kills it first, as do a repl cell and
// shutdown. repl_warm starts the REPL's interpreter ahead of its first
// cell (a pooled sandbox a session may take); an exec before any cell
// kills it, so a one-shot job's sandbox shows no REPL it never used.
//
// # REPL
//
// One persistent interpreter per agent (python3 -u -I -c repl.py) is
// started on the first repl request and shared by all connections; cells
// run one at a time against one globals dict. It talks to the agent over
// fds 3 (requests) and 4 (messages) with the same length+JSON framing.
// The interpreter is the code (ServerOptions.CodeUser), so its messages
// are untrusted: at most 8 MiB each, a result is taken only with the id
// of the cell it answers, messages between cells are dropped, artifacts
// are bounded and every result is cut to fit one frame. In the
// interpreter sys.stdout/sys.stderr are replaced by line-buffered writers
// that stream output messages, and raw writes to fds 1/2 (C code,
// subprocesses) are forwarded too. A trailing expression's repr is the cell's Value.
// matplotlib figures left open after a cell are returned as PNG artifacts
// (MPLBACKEND=Agg). At the timeout (or ctx cancel) the agent sends SIGINT
// (KeyboardInterrupt, globals kept, TimedOut); a cell still running after
// interruptGrace gets the interpreter killed (Restarted, globals lost).
// An interpreter that dies during a cell is replaced on the next call,
// whose result has Restarted set.
package agent
