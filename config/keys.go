package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Key is one configuration key as the tags of its field declare it.
type Key struct {
	// Path is the key in the YAML file: "sessions.max_ttl", "tenants[].name".
	Path string
	// Env and Flag are its environment variable and serve flag, if any.
	Env, Flag string
	// Doc says what it does; Default is its default as the README shows it.
	Doc, Default string
	checks       []string
	// index reaches the field from Config (nil under a list: no variable
	// or flag can set those).
	index []int
	typ   reflect.Type
}

// Keys lists every key, in the order of the structs above.
func Keys() []Key { return keys() }

var keys = sync.OnceValue(func() []Key {
	var out []Key
	walkKeys(reflect.TypeFor[Config](), "", []int{}, &out)
	return out
})

// EnvVars lists every environment variable a key reads, sorted, each once.
func EnvVars() []string {
	var out []string
	for _, k := range Keys() {
		if k.Env != "" && !slices.Contains(out, k.Env) {
			out = append(out, k.Env)
		}
	}
	slices.Sort(out)
	return out
}

// Flags lists the keys that are serve flags.
func Flags() []Key {
	var out []Key
	for _, k := range Keys() {
		if k.Flag != "" {
			out = append(out, k)
		}
	}
	return out
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	limitsType   = reflect.TypeFor[Limits]()
)

// leaf reports whether the walk stops at t: anything but a struct of this
// package (or a list of them), and those that decode themselves.
func leaf(t reflect.Type) bool {
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != limitsType.PkgPath() {
		return true
	}
	_, custom := reflect.New(t).Interface().(yaml.Unmarshaler)
	return custom
}

func walkKeys(t reflect.Type, prefix string, index []int, out *[]Key) {
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlName(sf)
		path := prefix + name
		var idx []int
		if index != nil {
			idx = append(slices.Clip(index), i)
		}
		k := Key{Path: path, Env: sf.Tag.Get("env"), Flag: sf.Tag.Get("flag"), Doc: sf.Tag.Get("doc"),
			Default: sf.Tag.Get("default"), index: idx, typ: sf.Type}
		if c := sf.Tag.Get("check"); c != "" {
			k.checks = strings.Split(c, ",")
		}
		switch {
		case sf.Type == limitsType:
			*out = append(*out, Key{Path: path + ".*", Doc: k.Doc, Default: k.Default})
			walkLimits(path, idx, out)
		case leaf(sf.Type):
			if k.Doc == "" {
				panic("config: key " + path + " has no doc tag")
			}
			*out = append(*out, k)
		case sf.Type.Kind() == reflect.Slice:
			if k.Doc != "" { // the list itself: an env variable may set it whole
				*out = append(*out, k)
			}
			walkKeys(sf.Type.Elem(), path+"[].", nil, out)
		default:
			walkKeys(sf.Type, path+".", idx, out)
		}
	}
}

// walkLimits makes one key per limit for each side: limits.defaults.X and
// limits.ceilings.X.
func walkLimits(path string, index []int, out *[]Key) {
	lt := reflect.TypeFor[Limits]()
	for side := range lt.NumField() {
		st := lt.Field(side)
		rt := st.Type
		for i := range rt.NumField() {
			f := rt.Field(i)
			*out = append(*out, Key{Path: path + "." + yamlName(st) + "." + yamlName(f), Doc: f.Tag.Get("doc"),
				index: append(slices.Clip(index), side, i), typ: f.Type, checks: []string{"nonnegative"}})
		}
	}
}

func yamlName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "" {
		panic("config: field " + sf.Name + " has no yaml tag")
	}
	return name
}

// field returns the key's field in c.
func (k Key) field(c *Config) reflect.Value {
	return reflect.ValueOf(c).Elem().FieldByIndex(k.index)
}

// ApplyEnv sets every key whose variable getenv reports non-empty.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	for _, k := range Keys() {
		if k.Env == "" {
			continue
		}
		if v := getenv(k.Env); v != "" {
			if err := setText(k.field(c), v); err != nil {
				return fmt.Errorf("%s=%q: %w", k.Env, redactFor(k, v), err)
			}
		}
	}
	return nil
}

// SetFlag sets the key of serve flag name from its text.
func (c *Config) SetFlag(name, value string) error {
	for _, k := range Flags() {
		if k.Flag == name {
			if err := setText(k.field(c), value); err != nil {
				return fmt.Errorf("--%s %q: %w", name, value, err)
			}
			return nil
		}
	}
	return fmt.Errorf("--%s: no such flag", name)
}

// redactFor hides the value of a variable that holds keys.
func redactFor(k Key, v string) string {
	if strings.Contains(k.Path, "keys") || strings.Contains(k.Path, "tenants") {
		return redact(v)
	}
	return v
}

// setText parses s into v by v's type: strings, booleans, integers,
// durations ("30s", or 0), lists (comma-separated), pointers to those, and
// types that implement encoding.TextUnmarshaler.
func setText(v reflect.Value, s string) error {
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch {
	case v.Type() == durationType:
		d, err := parseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := setText(p.Elem(), s); err != nil {
			return err
		}
		v.Set(p)
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean (true or false)")
		}
		v.SetBool(b)
	case v.CanInt():
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		v.SetInt(n)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var list []string
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list).Convert(v.Type()))
	default:
		panic("config: no text form for " + v.Type().String())
	}
	return nil
}

// parseDuration reads a Go duration ("1m30s") or 0.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"30s\", \"5m\")", s)
	}
	return v, nil
}
