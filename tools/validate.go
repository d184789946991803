package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// maxProblems keeps a ValidationError short enough for a model to read.
const maxProblems = 20

// schemaProblems flattens a schema validation error into one Problem per
// leaf error, with messages a model can act on, sorted and deduplicated.
// Type errors at the same place from different branches (anyOf, oneOf) are
// merged into one "expected a or b, got c".
func schemaProblems(err error) []Problem {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{Field: RootField, Message: err.Error()}}
	}
	var problems []Problem
	types := map[string]*kind.Type{} // merged type errors by field
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		var summary bool // the causes describe other values; the kind says it better
		switch e.ErrorKind.(type) {
		case *kind.Contains, *kind.PropertyNames:
			summary = true
		}
		if len(e.Causes) > 0 && !summary {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		field := pointer(e.InstanceLocation)
		if t, ok := e.ErrorKind.(*kind.Type); ok {
			if m, ok := types[field]; ok {
				for _, w := range t.Want {
					if !slices.Contains(m.Want, w) {
						m.Want = append(m.Want, w)
					}
				}
			} else {
				types[field] = &kind.Type{Got: t.Got, Want: slices.Clone(t.Want)}
			}
			return
		}
		for _, msg := range kindMessages(e.ErrorKind) {
			problems = append(problems, Problem{Field: field, Message: msg})
		}
	}
	walk(ve)
	for field, t := range types {
		problems = append(problems, Problem{Field: field, Message: fmt.Sprintf("expected %s, got %s", strings.Join(t.Want, " or "), t.Got)})
	}
	if len(problems) == 0 {
		problems = append(problems, Problem{Field: RootField, Message: "arguments do not match the schema"})
	}
	return sortProblems(problems)
}

// sortProblems sorts by field then message, drops duplicates and caps the
// list at maxProblems.
func sortProblems(ps []Problem) []Problem {
	slices.SortFunc(ps, func(a, b Problem) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	ps = slices.Compact(ps)
	if len(ps) > maxProblems {
		n := len(ps) - (maxProblems - 1)
		ps = append(ps[:maxProblems-1], Problem{Field: RootField, Message: fmt.Sprintf("and %d more problems", n)})
	}
	return ps
}

// pointer renders an instance location as a JSON pointer, RootField for "".
func pointer(loc []string) string {
	if len(loc) == 0 {
		return RootField
	}
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(tok))
	}
	return b.String()
}

// kindMessages says what a leaf error wants; some kinds give one message
// per property.
func kindMessages(k jsonschema.ErrorKind) []string {
	switch k := k.(type) {
	case *kind.Required:
		return eachQuoted("missing required property %s", k.Missing)
	case *kind.AdditionalProperties:
		return eachQuoted("additional property %s is not allowed", k.Properties)
	case *kind.DependentRequired:
		return eachQuoted("missing property %s, required when "+strconv.Quote(k.Prop)+" is set", k.Missing)
	case *kind.Dependency:
		return eachQuoted("missing property %s, required when "+strconv.Quote(k.Prop)+" is set", k.Missing)
	case *kind.Enum:
		vals := make([]string, len(k.Want))
		for i, v := range k.Want {
			vals[i] = display(v)
		}
		if len(vals) == 1 {
			return []string{"must be " + vals[0]}
		}
		return []string{"must be one of " + strings.Join(vals, ", ")}
	case *kind.Const:
		return []string{"must be " + display(k.Want)}
	case *kind.Format:
		return []string{"must be a valid " + k.Want}
	case *kind.MinLength:
		return []string{"must be at least " + plural(k.Want, "character") + " long"}
	case *kind.MaxLength:
		return []string{"must be at most " + plural(k.Want, "character") + " long"}
	case *kind.Pattern:
		return []string{"must match the pattern " + strconv.Quote(k.Want)}
	case *kind.Minimum:
		return []string{"must be >= " + ratString(k.Want)}
	case *kind.Maximum:
		return []string{"must be <= " + ratString(k.Want)}
	case *kind.ExclusiveMinimum:
		return []string{"must be > " + ratString(k.Want)}
	case *kind.ExclusiveMaximum:
		return []string{"must be < " + ratString(k.Want)}
	case *kind.MultipleOf:
		return []string{"must be a multiple of " + ratString(k.Want)}
	case *kind.MinItems:
		return []string{"must have at least " + plural(k.Want, "item")}
	case *kind.MaxItems:
		return []string{"must have at most " + plural(k.Want, "item")}
	case *kind.AdditionalItems:
		return []string{"has " + plural(k.Count, "item") + " more than allowed"}
	case *kind.UniqueItems:
		return []string{fmt.Sprintf("items %d and %d are equal; items must be unique", k.Duplicates[0], k.Duplicates[1])}
	case *kind.MinProperties:
		return []string{"must have at least " + plural(k.Want, "property")}
	case *kind.MaxProperties:
		return []string{"must have at most " + plural(k.Want, "property")}
	case *kind.PropertyNames:
		return []string{fmt.Sprintf("property name %q is not allowed", short(k.Property))}
	case *kind.Contains:
		return []string{"must contain an item matching the schema"}
	case *kind.MinContains:
		return []string{"must contain at least " + plural(k.Want, "item") + " matching the schema"}
	case *kind.MaxContains:
		return []string{"must contain at most " + plural(k.Want, "item") + " matching the schema"}
	case *kind.FalseSchema:
		return []string{"is not allowed"}
	case *kind.Not:
		return []string{"must not match the schema in \"not\""}
	case *kind.OneOf:
		return []string{"matches more than one of the allowed shapes (oneOf)"}
	case *kind.ContentEncoding:
		return []string{"must be " + k.Want + " encoded"}
	case *kind.ContentMediaType:
		return []string{"must be " + k.Want}
	default:
		return []string{"does not match the schema (" + strings.Join(k.KeywordPath(), "/") + ")"}
	}
}

func eachQuoted(format string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf(format, strconv.Quote(short(n)))
	}
	return out
}

// display renders a schema value (enum member, const) as JSON.
func display(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.RatString()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// plural renders "1 item", "2 items", "2 properties".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		noun = strings.TrimSuffix(noun, "y") + "ie"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// maxQuote bounds how much of a model's own text a message repeats.
const maxQuote = 64

// short cuts s to maxQuote bytes (on a rune boundary), marking the cut.
func short(s string) string {
	if len(s) <= maxQuote {
		return s
	}
	i := maxQuote
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
