package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Markdown is the README's configuration table, generated from the keys'
// tags and Defaults(); the README carries it verbatim (checked by a test).
func Markdown() string {
	var b strings.Builder
	b.WriteString("| key | environment / flag | default | meaning |\n|---|---|---|---|\n")
	def := Defaults()
	eff := def.Limits.Effective()
	def.Limits = eff
	for _, k := range Keys() {
		if strings.HasPrefix(k.Path, "limits.ceilings.") {
			continue // on the row of its default
		}
		keyCell := "`" + k.Path + "`"
		var sources []string
		if k.Env != "" {
			sources = append(sources, "`"+k.Env+"`")
		}
		if k.Flag != "" {
			sources = append(sources, "`--"+k.Flag+"`")
		}
		deflt := k.Default
		if name, ok := strings.CutPrefix(k.Path, "limits.defaults."); ok {
			ceil := strings.Replace(k.Path, ".defaults.", ".ceilings.", 1)
			keyCell += ", `" + ceil + "`"
			c := Key{index: append(k.index[:len(k.index)-2:len(k.index)-2], 1, k.index[len(k.index)-1]), typ: k.typ}
			deflt = formatValue(name, k.field(&def), "`") + " / " + formatValue(name, c.field(&def), "`")
		} else if deflt == "" && k.index != nil {
			deflt = formatValue(k.Path, k.field(&def), "`")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", keyCell, strings.Join(sources, ", "), deflt, k.Doc)
	}
	return b.String()
}

// DefaultText is the key's default as help texts show it.
func (k Key) DefaultText() string {
	if k.Default != "" || k.index == nil {
		return k.Default
	}
	def := Defaults()
	def.Limits = def.Limits.Effective()
	return formatValue(k.Path, k.field(&def), "")
}

// formatValue writes a default for the table: durations short ("1h",
// "5m"), byte sizes also in binary units, an empty value as "none"; quote
// surrounds literal values.
func formatValue(path string, v reflect.Value, quote string) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "none"
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return quote + shortDuration(time.Duration(v.Int())) + quote
	case v.CanInt() && strings.HasSuffix(path, "bytes") && v.Int() >= 1024:
		return fmt.Sprintf("%s%d%s (%s)", quote, v.Int(), quote, binarySize(v.Int()))
	case v.Kind() == reflect.Slice && v.Len() == 0, v.Kind() == reflect.String && v.String() == "":
		return "none"
	}
	return fmt.Sprintf("%s%v%s", quote, v.Interface(), quote)
}

// shortDuration drops the zero units of time.Duration's form: 1h, 5m, 30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func binarySize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n)/1024, 0
	for f >= 1024 && u < len(units)-1 {
		f, u = f/1024, u+1
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
