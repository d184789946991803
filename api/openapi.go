package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.0 description of this API, served at
// GET /openapi.yaml. Tests validate real responses against it.
//
//go:embed openapi.yaml
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}
