package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner"
)

// Limits are a job's and a session's resource limits: what applies when a
// request asks for none (Defaults) and the most a request may ask for
// (Ceilings). A zero field takes the built-in value; a zero default whose
// built-in value is above the ceiling takes the ceiling.
type Limits struct {
	Defaults runner.Limits `yaml:"defaults"`
	Ceilings runner.Limits `yaml:"ceilings"`
}

// Built-in limits, for every field the configuration leaves zero.
var (
	BuiltinDefaults = runner.Limits{
		MemoryBytes: 512 << 20, PIDs: 256, CPUMillis: 1000, Timeout: 60 * time.Second,
		OutputBytes: 1 << 20, NoFile: 1024, FileSize: 100 << 20,
		DiskBytes: workspace.DefaultBytes, DiskInodes: workspace.DefaultInodes,
	}
	BuiltinCeilings = runner.Limits{
		MemoryBytes: 4 << 30, PIDs: 1024, CPUMillis: 4000, Timeout: 30 * time.Minute,
		OutputBytes: 16 << 20, NoFile: 65536, FileSize: 1 << 30,
		DiskBytes: 8 << 30, DiskInodes: 1 << 20,
	}
)

// Effective fills the zero fields: a zero ceiling takes the built-in
// ceiling, a zero default the built-in default or the ceiling when that is
// lower.
func (l Limits) Effective() Limits {
	bd, bc := BuiltinDefaults, BuiltinCeilings
	eachLimit(func(name string, f func(*runner.Limits) *int64) {
		if c := f(&l.Ceilings); *c == 0 {
			*c = *f(&bc)
		}
		if d := f(&l.Defaults); *d == 0 {
			*d = min(*f(&bd), *f(&l.Ceilings))
		}
	})
	return l
}

// Resolve applies the rule of every request's limits to req: a request may
// ask for any value up to the ceiling; a field it leaves zero takes the
// default; a value above the ceiling (or negative) is an error naming the
// field and the ceiling. l must be Effective.
func (l Limits) Resolve(req runner.Limits) (runner.Limits, error) {
	var err error
	eachLimit(func(name string, f func(*runner.Limits) *int64) {
		v, c := f(&req), *f(&l.Ceilings)
		switch {
		case err != nil:
		case *v < 0:
			err = fmt.Errorf("limits.%s %s is negative", name, FormatLimit(name, *v))
		case c > 0 && *v > c:
			err = fmt.Errorf("limits.%s %s exceeds the ceiling %s (limits.ceilings.%s)", name, FormatLimit(name, *v), FormatLimit(name, c), name)
		case *v == 0:
			*v = *f(&l.Defaults)
		}
	})
	if err == nil {
		err = diskMinimum(req, "limits")
	}
	return req, err
}

// diskMinimum refuses disk limits below what a workspace filesystem can
// be (workspace.MinBytes, MinInodes); zero is not below.
func diskMinimum(l runner.Limits, prefix string) error {
	if err := (workspace.Limits{Bytes: l.DiskBytes, Inodes: l.DiskInodes}).Check(); err != nil {
		return fmt.Errorf("%s.%w", prefix, err)
	}
	return nil
}

// Validate reports negative limits and defaults above their ceilings.
func (l Limits) Validate() error {
	var errs []error
	l.check(func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) })
	return errors.Join(errs...)
}

// check reports negative limits and defaults above their ceilings (both
// configured, or a configured default above the built-in ceiling).
func (l Limits) check(bad func(string, ...any)) {
	eff := l.Effective()
	eachLimit(func(name string, f func(*runner.Limits) *int64) {
		for _, side := range []struct {
			prefix string
			v      int64
		}{{"limits.defaults", *f(&l.Defaults)}, {"limits.ceilings", *f(&l.Ceilings)}} {
			if side.v < 0 {
				bad("%s.%s %s: must not be negative", side.prefix, name, quoteLimit(name, side.v))
			}
		}
		if d, c := *f(&l.Defaults), *f(&eff.Ceilings); d > 0 && c > 0 && d > c {
			bad("limits.defaults.%s %s is above limits.ceilings.%s %s", name, quoteLimit(name, d), name, quoteLimit(name, c))
		}
	})
	for _, side := range []struct {
		prefix string
		l      runner.Limits
	}{{"limits.defaults", l.Defaults}, {"limits.ceilings", l.Ceilings}} {
		if side.l.DiskBytes >= 0 && side.l.DiskInodes >= 0 {
			if err := diskMinimum(side.l, side.prefix); err != nil {
				bad("%v", err)
			}
		}
	}
}

// FormatLimit writes a limit's value: a duration for the timeout, else the
// number.
func FormatLimit(name string, v int64) string {
	if name == "timeout" {
		return time.Duration(v).String()
	}
	return strconv.FormatInt(v, 10)
}

func quoteLimit(name string, v int64) string {
	if name == "timeout" {
		return strconv.Quote(FormatLimit(name, v))
	}
	return FormatLimit(name, v)
}

// LimitNames are the yaml names of runner.Limits' fields, in order.
func LimitNames() []string {
	var out []string
	eachLimit(func(name string, _ func(*runner.Limits) *int64) { out = append(out, name) })
	return out
}

// eachLimit calls fn for every field of runner.Limits (all int64 or
// time.Duration) with its yaml name and an accessor, so that a new limit
// needs no code here beyond its built-in values.
func eachLimit(fn func(name string, field func(*runner.Limits) *int64)) {
	t := reflect.TypeFor[runner.Limits]()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Type.Kind() != reflect.Int64 {
			panic("config: runner.Limits." + sf.Name + " is not an int64 or a duration")
		}
		fn(yamlName(sf), func(l *runner.Limits) *int64 {
			return (*int64)(reflect.ValueOf(l).Elem().Field(i).Addr().UnsafePointer())
		})
	}
}
