package tools

import "slices"

// Annotations are the MCP tool annotations that speak about effects
// (readOnlyHint, destructiveHint, openWorldHint, idempotentHint). This file
// is the one mapping between them and effect tags, used in both
// directions:
//
//   - effects → annotations (AnnotationsOf): the MCP export of a tool
//     (Export with FormatMCP, and sandboxd's own MCP server) tells clients
//     what a call may do;
//   - annotations → effects (Narrow): a tool provider's MCP server states
//     hints about its tools; they may only take effects away from what the
//     operator granted the provider, never add any.
//
// The mapping:
//
//	readOnlyHint     true  ⇔ neither file_write nor exec
//	destructiveHint  true  ⇔ file_write
//	openWorldHint    true  ⇔ http
//	idempotentHint   true  ⇔ the tool is marked idempotent, or it spends
//	                         nothing beyond file_read (RetrySafe)
//
// exec alone is not destructive (a sandboxed process changes nothing that
// outlives its sandbox unless it may write the workspace), and a read-only
// tool may still reach the network (openWorldHint says so).
type Annotations struct {
	ReadOnly bool
	// Destructive and OpenWorld are pointers because MCP defaults both to
	// true when a server leaves them out: nil means "not stated".
	Destructive *bool
	OpenWorld   *bool
	Idempotent  bool
}

// AnnotationsOf derives the annotations of a tool with effects (and the
// operator's idempotent mark).
func AnnotationsOf(effects []Effect, idempotent bool) Annotations {
	has := func(e Effect) bool { return slices.Contains(effects, e) }
	write, exec, http := has(EffectFileWrite), has(EffectExec), has(EffectHTTP)
	return Annotations{
		ReadOnly:    !write && !exec,
		Destructive: &write,
		OpenWorld:   &http,
		Idempotent:  idempotent || retrySafe(effects),
	}
}

// Narrow returns the effects of granted that a with these annotations
// leaves: readOnlyHint removes file_write and exec, a destructiveHint
// stated false removes file_write, an openWorldHint stated false removes
// http. Hints never add an effect, and idempotentHint changes nothing (only
// the operator may make a tool retryable). The order of granted is kept.
func (a Annotations) Narrow(granted []Effect) []Effect {
	out := make([]Effect, 0, len(granted))
	for _, e := range granted {
		switch {
		case a.ReadOnly && (e == EffectFileWrite || e == EffectExec):
		case e == EffectFileWrite && a.Destructive != nil && !*a.Destructive:
		case e == EffectHTTP && a.OpenWorld != nil && !*a.OpenWorld:
		default:
			out = append(out, e)
		}
	}
	return out
}

// MCP renders the annotations as an MCP tools/list "annotations" object.
func (a Annotations) MCP() map[string]any {
	m := map[string]any{"readOnlyHint": a.ReadOnly, "idempotentHint": a.Idempotent}
	if a.Destructive != nil {
		m["destructiveHint"] = *a.Destructive
	}
	if a.OpenWorld != nil {
		m["openWorldHint"] = *a.OpenWorld
	}
	return m
}

// MCPAnnotations is the MCP "annotations" object of t (AnnotationsOf its
// effects and idempotent mark).
func MCPAnnotations(t *Tool) map[string]any {
	return AnnotationsOf(t.Effects, t.Idempotent).MCP()
}

// retrySafe: nothing beyond file_read (reading twice changes nothing).
func retrySafe(effects []Effect) bool {
	for _, e := range effects {
		if e != EffectFileRead {
			return false
		}
	}
	return true
}
