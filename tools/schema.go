package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// emptyObjectSchema is the input schema of a tool that declares none.
var emptyObjectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// WrapKey is the property a non-object input schema is wrapped under: a tool
// whose input is, say, a string gets the input schema
// {"type":"object","properties":{"input":<schema>},"required":["input"]} and
// its Run or Command reads args["input"].
const WrapKey = "input"

// normalizedSchema is an input schema ready for models: always an object.
type normalizedSchema struct {
	raw     json.RawMessage // compact JSON, the schema models see
	wrapped bool            // the tool's own schema sits under WrapKey
	props   []string        // top-level property names in document order
}

// normalizeInputSchema returns the object schema models see for in.
func normalizeInputSchema(in json.RawMessage) (normalizedSchema, error) {
	in = bytes.TrimSpace(in)
	if len(in) == 0 || string(in) == "null" {
		return normalizedSchema{raw: emptyObjectSchema}, nil
	}
	doc, err := decodeOrdered(in)
	if err != nil {
		return normalizedSchema{}, fmt.Errorf("input schema is not valid JSON: %w", err)
	}
	obj, isObj := doc.(map[string]any)
	if !isObj {
		b, isBool := doc.(bool)
		if !isBool {
			return normalizedSchema{}, errors.New("input schema must be a JSON object or boolean")
		}
		if b { // true accepts anything: any object will do
			return normalizedSchema{raw: emptyObjectSchema}, nil
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, in); err != nil {
		return normalizedSchema{}, fmt.Errorf("input schema is not valid JSON: %w", err)
	}
	if isObj && isObjectSchema(obj) {
		// Keep the author's bytes (and so their property order, which
		// models follow when they write arguments).
		raw := compact.Bytes()
		switch _, ok := obj["type"]; {
		case ok:
		case len(obj) == 0:
			raw = []byte(`{"type":"object"}`)
		default:
			raw = append([]byte(`{"type":"object",`), raw[1:]...)
		}
		return normalizedSchema{raw: raw, props: orderedKeys(in, "properties")}, nil
	}
	// Wrap: the tool's schema becomes the "input" property. Keywords that
	// only mean something at a document's root move up with it, so that
	// "#/$defs/x" references keep resolving.
	inner := compact.Bytes()
	var hoisted []string
	if isObj {
		for _, k := range []string{"$schema", "$defs", "definitions"} {
			v, ok := obj[k]
			if !ok {
				continue
			}
			b, err := json.Marshal(v)
			if err != nil {
				return normalizedSchema{}, fmt.Errorf("input schema: %w", err)
			}
			hoisted = append(hoisted, fmt.Sprintf("%q:%s", k, b))
			delete(obj, k)
		}
		if len(hoisted) > 0 {
			b, err := json.Marshal(obj)
			if err != nil {
				return normalizedSchema{}, fmt.Errorf("input schema: %w", err)
			}
			inner = b
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{"` + WrapKey + `":`)
	b.Write(inner)
	b.WriteString(`},"required":["` + WrapKey + `"]`)
	for _, h := range hoisted {
		b.WriteByte(',')
		b.WriteString(h)
	}
	b.WriteByte('}')
	return normalizedSchema{raw: b.Bytes(), wrapped: true, props: []string{WrapKey}}, nil
}

// isObjectSchema reports whether a schema only accepts objects: type
// "object" (or ["object"]), or no type but object keywords. A schema without
// any constraint ({} or only annotations) counts too: it accepts objects,
// and a type is added.
func isObjectSchema(obj map[string]any) bool {
	switch t := obj["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return len(t) == 1 && t[0] == "object"
	case nil:
		if _, has := obj["type"]; has {
			return false
		}
		for _, k := range []string{"properties", "required", "additionalProperties", "patternProperties"} {
			if _, ok := obj[k]; ok {
				return true
			}
		}
		for k := range obj {
			switch k {
			case "title", "description", "$comment", "$schema", "$id", "examples", "default", "deprecated":
			default:
				return false
			}
		}
		return true
	}
	return false
}

// decodeOrdered decodes JSON keeping numbers as json.Number.
func decodeOrdered(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the schema")
	}
	return v, nil
}

// orderedKeys returns the keys of the object at doc[member] in the order the
// document writes them (Go maps forget it). Errors give nil.
func orderedKeys(doc []byte, member string) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil {
		return nil
	}
	raw, ok := top[member]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return keys
		}
		k, _ := tok.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}

// noLoader refuses every external reference: tool schemas are compiled
// from what the registry is given, never from files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

// compileSchema compiles raw (draft 2020-12 unless it says otherwise).
func compileSchema(loc string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// defaultDescription is the one-line summary of a tool without one, e.g.
// "bash(command, timeout_seconds)".
func defaultDescription(name string, props []string) string {
	return name + "(" + strings.Join(props, ", ") + ")"
}
