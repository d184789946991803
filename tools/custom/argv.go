package custom

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// argvTemplate is a YAML tool's argv: each element a literal with
// placeholders {name} naming arguments ({{ and }} are literal braces).
// Expanding it never goes through a shell: every element stays exactly
// one argv element whatever the values hold (spaces, quotes, ;, $()). An
// element whose placeholders name an argument the call left out is
// dropped, so "--limit={limit}" disappears with an absent optional limit.
type argvTemplate [][]argvPart

type argvPart struct {
	lit string
	arg string // "" for a literal part
}

// parseArgv checks every placeholder against the schema's properties.
func parseArgv(argv []string, props map[string]bool) (argvTemplate, error) {
	var t argvTemplate
	for i, el := range argv {
		parts, err := parseElement(el)
		if err != nil {
			return nil, fmt.Errorf("argv[%d] %q: %w", i, el, err)
		}
		for _, p := range parts {
			if p.arg != "" && !props[p.arg] {
				return nil, fmt.Errorf("argv[%d] %q: {%s} is not a property of input_schema", i, el, p.arg)
			}
		}
		if i == 0 && (len(parts) != 1 || parts[0].arg != "") {
			return nil, fmt.Errorf("argv[0] %q: the program must be a literal", el)
		}
		t = append(t, parts)
	}
	return t, nil
}

func parseElement(el string) ([]argvPart, error) {
	var parts []argvPart
	var lit strings.Builder
	for i := 0; i < len(el); i++ {
		c := el[i]
		switch {
		case c == '{' && i+1 < len(el) && el[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(el) && el[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(el[i:], '}')
			if end < 0 {
				return nil, errors.New("unclosed {")
			}
			name := el[i+1 : i+end]
			if name == "" || strings.ContainsAny(name, "{ ") {
				return nil, fmt.Errorf("bad placeholder {%s}", name)
			}
			if lit.Len() > 0 {
				parts = append(parts, argvPart{lit: lit.String()})
				lit.Reset()
			}
			parts = append(parts, argvPart{arg: name})
			i += end
		case c == '}':
			return nil, errors.New("unmatched } (write }} for a literal brace)")
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 || len(parts) == 0 {
		parts = append(parts, argvPart{lit: lit.String()})
	}
	return parts, nil
}

// expand builds the argv of one call (arguments already validated).
func (t argvTemplate) expand(args map[string]any) ([]string, error) {
	out := make([]string, 0, len(t))
	for _, parts := range t {
		var b strings.Builder
		keep := true
		for _, p := range parts {
			if p.arg == "" {
				b.WriteString(p.lit)
				continue
			}
			v, ok := args[p.arg]
			if !ok || v == nil {
				keep = false
				break
			}
			s, err := argString(v)
			if err != nil {
				return nil, fmt.Errorf("argument %s: %w", p.arg, err)
			}
			b.WriteString(s)
		}
		if keep {
			if strings.IndexByte(b.String(), 0) >= 0 {
				return nil, errors.New("an argument contains a NUL byte, which no argv element can hold")
			}
			out = append(out, b.String())
		}
	}
	return out, nil
}

// argString renders a value as one argv element: strings as they are,
// whole numbers without a fraction, booleans as true/false, arrays and
// objects as JSON.
func argString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return strconv.FormatInt(int64(v), 10), nil
		}
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	default:
		b, err := json.Marshal(v)
		return string(b), err
	}
}
