package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// fill sets every exported field of v (a pointer) to a non-zero value,
// recursively, so that a JSON rendering shows every field.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"a":1}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

func filled[T any]() *T {
	v := new(T)
	fill(reflect.ValueOf(v))
	return v
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWireShapes: the daemon's values that the API used to render as they
// are (a tool's result, a callback, an egress record, an approval, a
// timeline, a file's entry, a turn's call record) render in package wire's
// types with the same JSON, every field set, so a field added on one side
// and not the other fails here.
func TestWireShapes(t *testing.T) {
	t.Parallel()
	call := filled[job.CallRecord]()
	call.Guard = nil
	for _, tc := range []struct {
		name       string
		daemon, ap any
		extra      []string // keys only the API's shape has
	}{
		{"result", filled[tools.Result](), nil, nil},
		{"callback", filled[job.Callback](), nil, nil},
		{"egress", filled[job.EgressRecord](), nil, nil},
		{"approval", filled[job.Approval](), nil, nil},
		{"timeline", filled[job.Timeline](), nil, nil},
		{"file", filled[job.FileInfo](), nil, nil},
		{"call", call, nil, []string{"content", "is_error"}},
	} {
		var view any
		switch d := tc.daemon.(type) {
		case *tools.Result:
			view = viewResult(d)
		case *job.Callback:
			view = viewCallback(d)
		case *job.EgressRecord:
			view = viewEgress([]job.EgressRecord{*d})[0]
		case *job.Approval:
			view = viewApproval(d)
		case *job.Timeline:
			view = viewTimeline(d)
		case *job.FileInfo:
			view = viewFileInfo(*d)
		case *job.CallRecord:
			view = viewCall(*d)
		}
		want, got := asMap(t, tc.daemon), asMap(t, view)
		for _, k := range tc.extra {
			delete(got, k)
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: the daemon renders\n%v\nthe API\n%v", tc.name, want, got)
		}
	}
	// The job's own fields in its view (the renamed ones aside).
	j := filled[job.Job]()
	v := asMap(t, viewJob(j))
	for _, k := range []string{"id", "tenant", "tool", "call_id", "arguments", "idempotency_key", "runner", "session_id",
		"limits", "state", "reason", "result", "attempts", "created_at", "started_at", "finished_at", "guard", "egress", "callback"} {
		if _, ok := v[k]; !ok {
			t.Errorf("job view has no %q", k)
		}
	}
}
