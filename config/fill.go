package config

import "reflect"

// Fill sets every zero field of *v to the field of defaults, recursively
// into nested structs: how the job service and the API complete a section
// a library caller left partly zero (Fill(&cfg.Sessions,
// Defaults().Sessions)).
func Fill[T any](v *T, defaults T) {
	fill(reflect.ValueOf(v).Elem(), reflect.ValueOf(defaults))
}

func fill(v, d reflect.Value) {
	if v.Kind() == reflect.Struct {
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), d.Field(i))
			}
		}
		return
	}
	if v.IsZero() {
		v.Set(d)
	}
}
