package web

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the REST API's contract (OpenAPI 3.1), served at GET
// /v1/openapi.json. The REST tests check every answer they get against it
// (openapi_test.go), so the code and its description cannot drift apart:
// a new endpoint, field, status or error code needs its description here.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI 3.1 description of the REST API.
func OpenAPIDocument() []byte { return append([]byte(nil), openAPIDocument...) }

// openAPI serves the document; it needs no API key.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDocument)
}
