package api

import (
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// TestSpecCoversResult catches drift between tools.Result (owned by package
// tools, embedded in job responses) and openapi.yaml, whose Result schema
// refuses unknown properties.
func TestSpecCoversResult(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	result := doc.Components.Schemas["Result"].Value
	for _, tc := range []struct {
		typ    reflect.Type
		schema *openapi3.Schema
	}{
		{reflect.TypeFor[tools.Result](), result},
		{reflect.TypeFor[tools.Usage](), result.Properties["usage"].Value},
		{reflect.TypeFor[tools.ProcessInfo](), result.Properties["process"].Value},
		{reflect.TypeFor[tools.Artifact](), result.Properties["artifacts"].Value.Items.Value},
		{reflect.TypeFor[jobView](), doc.Components.Schemas["Job"].Value},
		{reflect.TypeFor[limitsBody](), doc.Components.Schemas["Limits"].Value},
		{reflect.TypeFor[eventView](), doc.Components.Schemas["Event"].Value},
		{reflect.TypeFor[toolView](), doc.Components.Schemas["Tool"].Value},
		{reflect.TypeFor[sessionView](), doc.Components.Schemas["Session"].Value},
		{reflect.TypeFor[sessionBody](), doc.Components.Schemas["SessionRequest"].Value},
		{reflect.TypeFor[job.FileInfo](), doc.Components.Schemas["FileInfo"].Value},
		{reflect.TypeFor[submitBody](), doc.Components.Schemas["SubmitRequest"].Value},
		{reflect.TypeFor[guardView](), doc.Components.Schemas["GuardDecision"].Value},
		{reflect.TypeFor[remainingView](), doc.Components.Schemas["GuardDecision"].Value.Properties["remaining"].Value.Items.Value},
		{reflect.TypeFor[job.EgressRecord](), doc.Components.Schemas["EgressRecord"].Value},
		{reflect.TypeFor[job.Approval](), doc.Components.Schemas["Approval"].Value},
		{reflect.TypeFor[decisionBody](), doc.Components.Schemas["ApprovalDecision"].Value},
		{reflect.TypeFor[batchView](), doc.Components.Schemas["Batch"].Value},
		{reflect.TypeFor[job.CallRecord](), doc.Components.Schemas["CallRecord"].Value},
		{reflect.TypeFor[callView](), doc.Components.Schemas["CallRecord"].Value},
		{reflect.TypeFor[tools.SourceStatus](), doc.Components.Schemas["SourceStatus"].Value},
	} {
		for i := 0; i < tc.typ.NumField(); i++ {
			name, _, _ := strings.Cut(tc.typ.Field(i).Tag.Get("json"), ",")
			if name == "-" || name == "" {
				continue
			}
			if _, ok := tc.schema.Properties[name]; !ok {
				t.Errorf("openapi.yaml: %s has no property %q (field %s)", tc.typ, name, tc.typ.Field(i).Name)
			}
		}
	}
}
