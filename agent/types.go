package agent

import (
	"io"
	"os"
	"time"
)

// ExecRequest asks the agent to run one process.
type ExecRequest struct {
	Args        []string      `json:"args"`
	Env         []string      `json:"env,omitempty"` // appended to the server's base env
	Dir         string        `json:"dir,omitempty"` // working directory; default: the server's root
	Stdin       []byte        `json:"stdin,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`      // 0: no timeout (ctx still applies)
	OutputLimit int64         `json:"output_limit,omitempty"` // per stream; 0: DefaultOutputLimit; clamped to MaxOutputLimit
	// LongLived marks a process that serves requests until it exits or is
	// cancelled (an MCP server on its stdio): no Timeout applies, its
	// stdin is streamed (Client.Exec reads StdinStream and sends it as it
	// arrives, after Stdin), and every output chunk is streamed to the
	// caller; OutputLimit still caps what the result keeps.
	LongLived bool `json:"long_lived,omitempty"`
	// StdinStream is the stdin of a LongLived exec, read by Client.Exec
	// until EOF (then the process's stdin is closed). Never on the wire.
	StdinStream io.Reader `json:"-"`
	// Stop, when closed, kills the process's group (Client.Exec sends a
	// kill message): Exec then returns the result, output so far
	// included, with Killed set. For a host that decides the process
	// must end (a fork loop) and still wants its result. Never on the wire.
	Stop <-chan struct{} `json:"-"`
}

// ExecResult reports how a process ended. A non-zero exit, a signal or a
// timeout are results, not errors.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"`        // 128+signal number when killed by a signal, as a shell reports it; 127 not found, 126 not executable
	Signal          string        `json:"signal,omitempty"` // e.g. "killed", "terminated"
	TimedOut        bool          `json:"timed_out,omitempty"`
	Stdout          []byte        `json:"stdout,omitempty"` // head and tail kept, marker in between when truncated
	Stderr          []byte        `json:"stderr,omitempty"`
	StdoutTruncated bool          `json:"stdout_truncated,omitempty"`
	StderrTruncated bool          `json:"stderr_truncated,omitempty"`
	Duration        time.Duration `json:"duration"`
	// KilledAt is when the agent sent the kill of a timed-out process.
	KilledAt time.Time `json:"killed_at,omitempty"`
	// Killed: the process was killed by ExecRequest.Stop (a kill message).
	Killed bool `json:"killed,omitempty"`
	// OOMKilled, CPU and PeakMemory are the container's cgroup as the
	// agent saw it from inside (ServerOptions.CgroupUsage): the OOM
	// killer killed the process, the CPU time used while it ran, the
	// container's peak memory.
	OOMKilled  bool          `json:"oom_killed,omitempty"`
	CPU        time.Duration `json:"cpu,omitempty"`
	PeakMemory int64         `json:"peak_memory,omitempty"`
}

// REPLRequest runs one cell in the agent's persistent Python interpreter.
type REPLRequest struct {
	Code        string        `json:"code"`
	Timeout     time.Duration `json:"timeout,omitempty"`      // 0: DefaultREPLTimeout
	OutputLimit int64         `json:"output_limit,omitempty"` // per stream; 0: DefaultOutputLimit
}

// REPLResult is the outcome of one cell. A Python exception is OK=false
// with the traceback in Error; it is a result, not an error.
type REPLResult struct {
	OK     bool   `json:"ok"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	Value  string `json:"value,omitempty"` // repr of the trailing expression, "" if none/None
	Error  string `json:"error,omitempty"` // traceback, or why the interpreter is gone
	// ExitCode is the cell's status as the one-shot interpreter's exit
	// status would be: 0, 1 after an uncaught exception (Error holds its
	// traceback), SystemExit's code (no traceback: sys.exit(3) is 3, a
	// message is printed to Stderr and is 1). 0 with OK false: the
	// interpreter died or timed out (Error, TimedOut, Restarted say).
	ExitCode  int           `json:"exit_code,omitempty"`
	Artifacts []Artifact    `json:"artifacts,omitempty"`
	TimedOut  bool          `json:"timed_out,omitempty"`
	Restarted bool          `json:"restarted,omitempty"` // interpreter was restarted; globals lost
	Duration  time.Duration `json:"duration"`
}

// Artifact is a file produced by a cell, e.g. a matplotlib figure as PNG.
type Artifact struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Data     []byte `json:"data"`
}

// FileInfo describes one file below the agent's root.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	IsDir   bool        `json:"is_dir,omitempty"`
	ModTime time.Time   `json:"mod_time"`
}

// Limits of the protocol. Results must fit in one frame, so per-stream
// output and file reads are clamped well below MaxFrameSize (JSON carries
// bytes as base64, 4/3 of their size).
const (
	MaxFrameSize       = 8 << 20
	DefaultOutputLimit = 1 << 20
	MaxOutputLimit     = 2 << 20
	MaxReadFileBytes   = 4 << 20
	DefaultREPLTimeout = 60 * time.Second
	MaxInFlight        = 256 // concurrent requests per connection
)
