package tools

// CONTRACT STUB: the signatures below are the agreed API of package tools.
// The implementation replaces this file (delete it when the real code lands).

import (
	"errors"
	"fmt"
	"strings"
)

// Errors.
var (
	ErrUnknownTool = errors.New("unknown tool")
	ErrInvalidTool = errors.New("invalid tool definition")
)

// ValidationError says what is wrong with a call's arguments, in words a
// model can act on.
type ValidationError struct {
	Tool string
	// Problems each name a field (JSON pointer, "" for the whole object)
	// and what was expected.
	Problems []Problem
}

// Problem is one violation.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid arguments for %s:", e.Tool)
	for _, p := range e.Problems {
		fmt.Fprintf(&b, " %s: %s;", p.Field, p.Message)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Format of a schema export.
type Format string

const (
	FormatOpenAI    Format = "openai"
	FormatAnthropic Format = "anthropic"
	FormatMCP       Format = "mcp"
)

// Registry holds tools by name with aliases; lookups are case-insensitive.
type Registry struct{}

// NewRegistry returns an empty registry with the default aliases
// (file_read→read_file, shell→bash, python→python_repl).
func NewRegistry() *Registry { panic("unimplemented") }

// Register adds or replaces (last wins, keeping the first insertion's
// position) a tool after normalising and validating it.
func (r *Registry) Register(t *Tool) error { panic("unimplemented") }

// Lookup finds a tool by name or alias, case-insensitively.
func (r *Registry) Lookup(name string) (*Tool, bool) { panic("unimplemented") }

// Names returns tool names in insertion order.
func (r *Registry) Names() []string { panic("unimplemented") }

// Export renders the tools (all when names is empty) in a model format.
func (r *Registry) Export(f Format, names ...string) ([]map[string]any, error) {
	panic("unimplemented")
}

// Prepare resolves a call against the registry: assigns an ID when missing,
// parses and repairs the arguments, and validates them against the tool's
// schema. Errors: ErrUnknownTool (wrapped), *ValidationError.
func (r *Registry) Prepare(c Call) (Call, *Tool, map[string]any, error) { panic("unimplemented") }
