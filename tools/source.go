package tools

import "time"

// SourceStatus is the state of one source of tools beyond the built-ins:
// the tools directory, or an MCP provider. GET /v1/tools and /metrics
// show it.
type SourceStatus struct {
	Name string `json:"name"`
	// Kind is "directory" or "provider".
	Kind string `json:"kind"`
	// State of a provider: "stopped" (lazy, not started yet), "starting",
	// "ready", "restarting" (it died or failed to start; NextStart says
	// when it is tried again). The directory is "loaded".
	State string `json:"state"`
	// Error is why a provider is not ready (its last failure).
	Error string `json:"error,omitempty"`
	// Tools are the registry names of the source's tools.
	Tools     []string   `json:"tools"`
	Restarts  int        `json:"restarts,omitempty"`
	Since     time.Time  `json:"since,omitzero"`
	NextStart *time.Time `json:"next_start,omitempty"`
	// Problems are the files of the directory that did not load, each
	// with what is wrong; the others loaded.
	Problems []FileProblem `json:"problems,omitempty"`
}

// FileProblem is a tool file that was refused.
type FileProblem struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}
