package policy

import "strings"

// The agent model (issue 9), one for every runner: the agent (pid 1 of the
// sandbox, cmd/sandbox-agent) runs as AgentUID with only
// AgentCapabilities, no_new_privs, the sandbox's seccomp profile, and
// makes itself non-dumpable; every process it starts for the code (exec,
// the Python REPL) runs as CodeUID:CodeGID with no supplementary groups
// and no capabilities. Its socket is runner.AgentSocketPath, in a
// directory of AgentUID with mode 0700: the code can neither see nor
// reach it.
const (
	AgentUID = 0
	CodeUID  = 65534
	CodeGID  = 65534
)

// Capability is a Linux capability by name (as OCI and Docker spell it)
// and number.
type Capability struct {
	Name string
	Bit  uint
}

// AgentCapabilities are the agent's bounding, effective and permitted
// capabilities (inheritable and ambient are empty), and why it keeps each.
var AgentCapabilities = []Capability{
	{"CAP_CHOWN", 0},        // files it creates for the code are owned by CodeUID:CodeGID
	{"CAP_DAC_OVERRIDE", 1}, // file operations on the code's files, whatever their modes
	{"CAP_FOWNER", 3},       // chmod of the code's files
	{"CAP_KILL", 5},         // kill the code's processes (another uid) on timeout, cancel and close
	{"CAP_SETGID", 6},       // start the code as CodeGID with no supplementary groups
	{"CAP_SETUID", 7},       // start the code as CodeUID
}

// AgentCapabilityNames are the names of AgentCapabilities.
func AgentCapabilityNames() []string {
	out := make([]string, len(AgentCapabilities))
	for i, c := range AgentCapabilities {
		out[i] = c.Name
	}
	return out
}

// AgentCapabilityMask is AgentCapabilities as the bit mask of
// /proc/<pid>/status (CapEff, CapBnd, ...).
func AgentCapabilityMask() uint64 {
	var m uint64
	for _, c := range AgentCapabilities {
		m |= 1 << c.Bit
	}
	return m
}

// agentCapabilityList is the capabilities for prose: "CAP_CHOWN, ... and CAP_SETUID".
func agentCapabilityList() string {
	n := AgentCapabilityNames()
	return strings.Join(n[:len(n)-1], ", ") + " and " + n[len(n)-1]
}
