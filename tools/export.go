package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Format of a schema export.
type Format string

const (
	// FormatOpenAI is OpenAI function calling:
	// {"type":"function","function":{"name","description","parameters"}}.
	FormatOpenAI Format = "openai"
	// FormatAnthropic is Anthropic tools: {"name","description","input_schema"}.
	FormatAnthropic Format = "anthropic"
	// FormatMCP is an MCP tools/list entry: {"name","description",
	// "inputSchema","outputSchema"?,"annotations"}.
	FormatMCP Format = "mcp"
)

// Formats lists the export formats.
var Formats = []Format{FormatOpenAI, FormatAnthropic, FormatMCP}

// ParseFormat reads a format name, case-insensitively. The empty string is
// FormatOpenAI, the most widely understood shape. Other names give an error
// wrapping ErrUnknownFormat.
func ParseFormat(s string) (Format, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return FormatOpenAI, nil
	}
	f := Format(s)
	if !slices.Contains(Formats, f) {
		return "", fmt.Errorf("%w %q (want openai, anthropic or mcp)", ErrUnknownFormat, s)
	}
	return f, nil
}

// Export renders the tools (all, in insertion order, when names is empty;
// else the named ones, in the given order, aliases resolved, duplicates
// dropped) in a model format. Schemas are json.RawMessage values holding the
// normalised schema bytes, so json.Marshal keeps the author's property order;
// every call returns fresh copies the caller may modify. Errors wrap
// ErrUnknownFormat or ErrUnknownTool.
func (r *Registry) Export(f Format, names ...string) ([]map[string]any, error) {
	return r.export(f, nil, names...)
}

// export is Export; with w, descriptions are as true where w says.
func (r *Registry) export(f Format, w *Where, names ...string) ([]map[string]any, error) {
	if !slices.Contains(Formats, f) {
		return nil, fmt.Errorf("%w %q (want openai, anthropic or mcp)", ErrUnknownFormat, string(f))
	}
	r.mu.RLock()
	var tools []*Tool
	if len(names) == 0 {
		for _, k := range r.order {
			tools = append(tools, r.entries[k].tool)
		}
	} else {
		for _, n := range names {
			e := r.find(n)
			if e == nil {
				err := r.unknownTool(n)
				r.mu.RUnlock()
				return nil, err
			}
			if !slices.Contains(tools, e.tool) {
				tools = append(tools, e.tool)
			}
		}
	}
	r.mu.RUnlock()

	out := make([]map[string]any, 0, len(tools))
	for _, t := range tools {
		if w != nil {
			t = t.In(*w)
		}
		out = append(out, exportTool(f, t))
	}
	return out, nil
}

// ReturnDirectField is the extension field of a ReturnDirect tool in the
// exports: none of the formats has a field of its own for it.
const ReturnDirectField = "x-return-direct"

func exportTool(f Format, t *Tool) map[string]any {
	m := exportShape(f, t)
	if t.ReturnDirect {
		m[ReturnDirectField] = true
	}
	return m
}

func exportShape(f Format, t *Tool) map[string]any {
	in := json.RawMessage(slices.Clone(t.InputSchema))
	switch f {
	case FormatAnthropic:
		return map[string]any{"name": t.Name, "description": t.Description, "input_schema": in}
	case FormatMCP:
		m := map[string]any{
			"name":        t.Name,
			"description": t.Description,
			"inputSchema": in,
			"annotations": MCPAnnotations(t),
		}
		if _, out := MCPSchemas(t); out != nil {
			m["outputSchema"] = out
		}
		return m
	default: // FormatOpenAI
		return map[string]any{
			"type": "function",
			"function": map[string]any{
				"name":        t.Name,
				"description": t.Description,
				"parameters":  in,
			},
		}
	}
}

// MCPSchemas are t's schemas as MCP lists them (the export above and
// sandboxd's own MCP server): fresh copies of the input schema, and of the
// output schema when it describes objects (else nil).
func MCPSchemas(t *Tool) (in, out json.RawMessage) {
	in = json.RawMessage(slices.Clone(t.InputSchema))
	if o := t.OutputSchema; len(o) > 0 && outputIsObject(o) {
		out = json.RawMessage(slices.Clone(o))
	}
	return in, out
}

// outputIsObject reports whether an output schema describes objects: MCP
// requires outputSchema to be an object schema (structuredContent is an
// object), so other output schemas are left out of the MCP export.
func outputIsObject(raw json.RawMessage) bool {
	doc, err := decodeOrdered(raw)
	if err != nil {
		return false
	}
	obj, ok := doc.(map[string]any)
	return ok && isObjectSchema(obj)
}
