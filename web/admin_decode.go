package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-dev/ordo/engine"
)

// adminBodyLimit bounds an admin write's body, read after authentication:
// the page's forms are a few hundred bytes.
const adminBodyLimit = 64 << 10

// readAdminJSON reads a page's JSON form into v: unknown fields refused,
// errors named by the field in the contract's words (a JSON kind, never a
// Go type).
func readAdminJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readJSONBody(w, r, adminBodyLimit)
	if err != nil {
		return err
	}
	return decodeAdminJSON(body, v)
}

// decodeAdminJSON decodes one JSON object into v, as readAdminJSON.
func decodeAdminJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("trailing data")
	}
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return engine.Errorf(engine.CodeInvalid, "%s: must be %s", typeErr.Field, adminJSONKind(typeErr.Type))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return engine.Errorf(engine.CodeInvalid, "%s: unknown field", name)
	}
	return engine.Errorf(engine.CodeInvalid, "body: must be one JSON object")
}

// adminJSONKind says what a Go type is in JSON's words.
func adminJSONKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// queryInt reads a non-negative integer query parameter; 0 when absent.
func queryInt(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, engine.Errorf(engine.CodeInvalid, "%s: must be a non-negative integer", name)
	}
	return n, nil
}

// queryTime reads an RFC 3339 time query parameter; zero when absent.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, engine.Errorf(engine.CodeInvalid, "%s: must be an RFC 3339 time such as 2026-11-26T10:00:00Z", name)
	}
	return t, nil
}

// parseAge reads an age such as 90s, 15m, 2h or 3d; "" is 0.
func parseAge(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(d)
		if err == nil && n >= 0 && n <= 3650 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, nil
	}
	return 0, engine.Errorf(engine.CodeInvalid, "%s: must be an age such as 30m, 2h or 3d", field)
}
