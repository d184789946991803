package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Decode reads a YAML file over c strictly: an unknown key is an error that
// names the closest valid key, a scalar of the wrong type names the key and
// quotes the value, and more than one document is an error. An empty file
// changes nothing.
func Decode(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	var errs []error
	check(&doc, reflect.TypeFor[Config](), "", &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return doc.Decode(c)
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// check walks node against the type it decodes into, collecting unknown
// keys and scalars that cannot be that type. A duration written as a bare
// 0 is retagged as the string "0" (the decoder refuses integers there).
func check(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	bad := func(n *yaml.Node, format string, args ...any) {
		where := path
		if where == "" {
			where = "the top level"
		}
		*errs = append(*errs, fmt.Errorf("line %d: %s: %s", n.Line, where, fmt.Sprintf(format, args...)))
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			check(c, t, path, errs)
		}
		return
	case yaml.AliasNode:
		check(n.Alias, t, path, errs)
		return
	}
	if n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // it checks itself
	}
	if t == durationType {
		if n.Kind != yaml.ScalarNode {
			bad(n, "want a duration like \"30s\"")
		} else if _, err := parseDuration(n.Value); err != nil {
			bad(n, "%v", err)
		} else {
			n.Tag = "!!str"
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad(n, "want a mapping of %s", strings.Join(fieldNames(t), ", "))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sf, ok := fieldByYAML(t, k.Value)
			if !ok {
				at := path
				if at != "" {
					at += "."
				}
				msg := fmt.Sprintf("line %d: unknown key %q", k.Line, at+k.Value)
				if s := closest(k.Value, fieldNames(t)); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", at+s)
				}
				*errs = append(*errs, errors.New(msg+"; valid keys here: "+strings.Join(fieldNames(t), ", ")))
				continue
			}
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			check(v, sf.Type, sub, errs)
		}
	case reflect.Slice:
		if n.Kind == yaml.ScalarNode && reflect.PointerTo(t).Implements(textUnmarshalerType) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			bad(n, "want a list")
			return
		}
		for i, c := range n.Content {
			check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad(n, "want a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			check(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value, errs)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			bad(n, "want a string")
		}
	case reflect.Bool:
		if _, err := strconv.ParseBool(n.Value); n.Kind != yaml.ScalarNode || err != nil {
			bad(n, "%q is not a boolean (true or false)", n.Value)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, t.Bits()); n.Kind != yaml.ScalarNode || err != nil {
			bad(n, "%q is not an integer", n.Value)
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(n.Value, 64); n.Kind != yaml.ScalarNode || err != nil {
			bad(n, "%q is not a number", n.Value)
		}
	}
}

// fieldNames are the YAML keys of struct t.
func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if name, ok := keyOf(t.Field(i)); ok {
			out = append(out, name)
		}
	}
	return out
}

// fieldByYAML finds the field of struct t that key decodes into.
func fieldByYAML(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if name, ok := keyOf(t.Field(i)); ok && name == key {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// keyOf is the YAML key of a field as the decoder sees it.
func keyOf(sf reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if !sf.IsExported() || name == "-" {
		return "", false
	}
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name, true
}

// closest returns the candidate nearest to s by edit distance, if it is
// near enough to be a typo: at most a third of the longer word apart, or
// half of it when both start alike ("adress" for "addr"), or a prefix of
// it either way.
func closest(s string, candidates []string) string {
	s = strings.ToLower(s)
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	longer := max(len(s), len(best))
	alike := len(s) >= 2 && len(best) >= 2 && s[:2] == best[:2]
	if bestD <= max(1, longer/3) || (alike && bestD <= longer*2/3) || strings.HasPrefix(best, s) || strings.HasPrefix(s, best) {
		return best
	}
	return ""
}

// editDistance is the Damerau–Levenshtein distance (adjacent swaps count
// one) between a and b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
