package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ordo-dev/ordo/web"
)

// The REST tests check every answer they get from the API against the
// OpenAPI document (web/openapi.json, served at /v1/openapi.json): their
// HTTP client's transport does (contractClient), and so do the tests that
// call the handler in-process (checkRecorded). A new endpoint, field,
// status, header or error code fails them until it is described.

var contract struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
	// bodies validates JSON bodies against the document's schemas, each
	// compiled once: kin-openapi's 3.1 (JSON Schema 2020-12) validation
	// compiles the schema again for every value, which the
	// concurrent-clients test cannot afford for 10,000 answers.
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
}

// contractURL names the document for the JSON Schema compiler.
const contractURL = "https://ordo.invalid/openapi.json"

// loadContract parses and validates the document once per test binary.
func loadContract(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	contract.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(web.OpenAPIDocument())
		if err != nil {
			contract.err = fmt.Errorf("parse openapi.json: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			contract.err = fmt.Errorf("openapi.json does not validate: %w", err)
			return
		}
		contract.doc = doc
		if contract.router, contract.err = gorillamux.NewRouter(doc); contract.err != nil {
			return
		}
		raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(web.OpenAPIDocument()))
		if err != nil {
			contract.err = err
			return
		}
		contract.compiler = jsonschema.NewCompiler()
		contract.compiler.DefaultDraft(jsonschema.Draft2020)
		contract.err = contract.compiler.AddResource(contractURL, raw)
		contract.compiled = map[string]*jsonschema.Schema{}
	})
	if contract.err != nil {
		t.Fatal(contract.err)
	}
	return contract.doc, contract.router
}

// inContract says whether the document describes path's answers: the REST
// API under /v1/ and the probes. Meta's webhooks, the admin page and the
// sandbox are not part of it.
func inContract(path string) bool {
	return strings.HasPrefix(path, "/v1/") || path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// checkContract returns what in resp (the answer to req) the document does
// not allow, or "" if nothing; resp's body is read and put back.
func checkContract(t testing.TB, req *http.Request, resp *http.Response) string {
	t.Helper()
	if !inContract(req.URL.Path) || req.Method == http.MethodHead {
		return ""
	}
	doc, router := loadContract(t)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return "" // the test itself sees the broken body
	}
	what := fmt.Sprintf("%s %s → %d %s", req.Method, req.URL.EscapedPath(), resp.StatusCode, bytes.TrimSpace(body))
	route, params, err := router.FindRoute(req)
	switch {
	case errors.Is(err, routers.ErrPathNotFound) && resp.StatusCode == http.StatusNotFound,
		errors.Is(err, routers.ErrMethodNotAllowed) && resp.StatusCode == http.StatusMethodNotAllowed:
		// No such endpoint, or not with this method: the error shape still holds.
		return checkSchema(doc, "Error", resp, body, what)
	case err != nil:
		return fmt.Sprintf("%s: the route is not described in web/openapi.json (%v)", what, err)
	}
	// kin-openapi checks the status, the headers and the media type; the
	// body's schema is checked below, compiled once.
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Sprintf("%s: not as web/openapi.json says: %v", what, err)
	}
	ref := route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil {
		ref = route.Operation.Responses.Default()
	}
	mime := resp.Header.Get("Content-Type")
	mt := ref.Value.Content.Get(mime)
	if mt == nil {
		return fmt.Sprintf("%s: Content-Type %q not described in web/openapi.json", what, mime)
	}
	if mt.Schema == nil || !strings.HasPrefix(mime, "application/json") {
		return ""
	}
	if mt.Schema.Ref == "" {
		// An inline schema (rare): kin-openapi's own, slower check.
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Sprintf("%s: not JSON: %v", what, err)
		}
		if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Sprintf("%s: not as web/openapi.json says: %v", what, err)
		}
		return ""
	}
	return validateBody(mt.Schema.Ref, body, what)
}

// validateBody checks body against the document's schema at ref
// ("#/components/schemas/…"), compiled on first use.
func validateBody(ref string, body []byte, what string) string {
	contract.mu.Lock()
	sch, ok := contract.compiled[ref]
	if !ok {
		var err error
		if sch, err = contract.compiler.Compile(contractURL + ref); err != nil {
			contract.mu.Unlock()
			return fmt.Sprintf("%s: compile %s: %v", what, ref, err)
		}
		contract.compiled[ref] = sch
	}
	contract.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Sprintf("%s: not JSON: %v", what, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Sprintf("%s: not as web/openapi.json says (%s): %v", what, ref, err)
	}
	return ""
}

// checkSchema checks a JSON body against one of the document's schemas.
func checkSchema(doc *openapi3.T, name string, resp *http.Response, body []byte, what string) string {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Sprintf("%s: Content-Type %q, want application/json", what, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Sprintf("%s: not JSON: %v", what, err)
	}
	return validateBody("#/components/schemas/"+name, body, what)
}

// contractTransport checks every answer against the document.
type contractTransport struct {
	t    testing.TB
	next http.RoundTripper
}

func (c contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if problem := checkContract(c.t, req, resp); problem != "" {
		c.t.Errorf("API contract: %s", problem)
	}
	return resp, nil
}

// contractClient returns c with every answer checked against the document.
func contractClient(t testing.TB, c *http.Client) *http.Client {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cc := *c
	cc.Transport = contractTransport{t: t, next: next}
	return &cc
}

// checkRecorded checks a handler's recorded answer to req against the
// document.
func checkRecorded(t testing.TB, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	if problem := checkContract(t, req, rec.Result()); problem != "" {
		t.Errorf("API contract: %s", problem)
	}
}

// The document is valid OpenAPI 3.1, is what /v1/openapi.json serves
// without an API key, and describes every route of the API.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc, _ := loadContract(t)
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(onDisk) {
		t.Fatal("openapi.json is not JSON")
	}
	srv := httptest.NewServer(web.New(web.Config{}, nil, nil, nil, nil).Handler())
	t.Cleanup(srv.Close)
	resp, err := contractClient(t, srv.Client()).Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(served, onDisk) {
		t.Fatalf("GET /v1/openapi.json without a key: %d, %d bytes; want 200 and web/openapi.json (%d bytes)", resp.StatusCode, len(served), len(onDisk))
	}
	for _, path := range []string{"/v1/messages", "/v1/messages/{message_id}", "/v1/conversations/{conversation_id}",
		"/v1/dead-letters", "/v1/dead-letters/{id}", "/v1/dead-letters/{id}/replay", "/v1/dead-letters/{id}/skip",
		"/v1/openapi.json", "/healthz", "/readyz", "/metrics"} {
		if doc.Paths.Value(path) == nil {
			t.Errorf("web/openapi.json does not describe %s", path)
		}
	}
}

// The checker itself refuses what the document does not allow.
func TestOpenAPICheckerRefusesDrift(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		want               string // in the problem; "" for none
	}{
		{"a good answer", "GET", "/healthz", 200, nil, `{"status":"ok"}`, ""},
		{"a field not described", "GET", "/healthz", 200, nil, `{"status":"ok","extra":1}`, "extra"},
		{"a status not described", "GET", "/healthz", 418, nil, `{"status":"ok"}`, "status is not supported"},
		{"401 without WWW-Authenticate", "GET", "/v1/messages/x", 401, http.Header{}, `{"error":{"code":"unauthorized","message":"no key"}}`, "WWW-Authenticate"},
		{"429 without Retry-After", "POST", "/v1/messages", 429, http.Header{}, `{"error":{"code":"rate_limited","message":"slow down"}}`, "Retry-After"},
		{"an error code not described", "GET", "/v1/messages/x", 404, nil, `{"error":{"code":"gone_fishing","message":"x"}}`, "code"},
		{"a route not described", "POST", "/v1/brand-new", 201, nil, `{}`, "not described"},
		{"no such endpoint", "GET", "/v1/nothing-here", 404, nil, `{"error":{"code":"not_found","message":"no such endpoint"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, tc.path, nil)
			h := http.Header{"Content-Type": {"application/json"}}
			for k, v := range tc.header {
				h[k] = v
			}
			resp := &http.Response{StatusCode: tc.status, Header: h, Body: io.NopCloser(strings.NewReader(tc.body))}
			got := checkContract(t, req, resp)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("problem %q, want one mentioning %q", got, tc.want)
			}
		})
	}
}
