package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
)

// HandlerAuthCredential is the vault name of a tenant's handler auth: the
// credential an n8n Webhook node checks natively, sent on every handler call
// (and event delivery). Stored as one of
//
//	{"header": "X-N8N-Key", "value": "…"}                 n8n "Header Auth"
//	{"basic_user": "…", "basic_password": "…"}           n8n "Basic Auth"
//
// with `ordo credential set --tenant S --name handler_auth --from-file -`.
const HandlerAuthCredential = "handler_auth"

// HandlerAuth is a tenant's handler auth (HandlerAuthCredential). Its
// String, GoString, LogValue and MarshalJSON show the kind and the header
// name only, never the secret, so printing or logging one is safe.
type HandlerAuth struct {
	// Header and Value: n8n's Header Auth (the header's name and value).
	Header, Value string
	// BasicUser and BasicPassword: n8n's Basic Auth.
	BasicUser, BasicPassword string
}

// reservedHeaders are set by ordo on every handler call; handler auth may
// not replace them (the signature and the idempotency key are the contract).
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Host": true, "User-Agent": true,
	"X-Ordo-Signature": true, "Idempotency-Key": true, "Transfer-Encoding": true, "Connection": true,
}

// headerName is an HTTP field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")

// ParseHandlerAuth reads a handler_auth credential. Errors name fields,
// never values.
func ParseHandlerAuth(raw []byte) (HandlerAuth, error) {
	var v struct {
		Header        *string `json:"header"`
		Value         *string `json:"value"`
		BasicUser     *string `json:"basic_user"`
		BasicPassword *string `json:"basic_password"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return HandlerAuth{}, invalid(HandlerAuthCredential, `want {"header": "<name>", "value": "<secret>"} (Header Auth) or {"basic_user": "…", "basic_password": "…"} (Basic Auth)`)
	}
	header, basic := v.Header != nil || v.Value != nil, v.BasicUser != nil || v.BasicPassword != nil
	switch {
	case header && basic:
		return HandlerAuth{}, invalid(HandlerAuthCredential, "either header and value (Header Auth) or basic_user and basic_password (Basic Auth), not both")
	case header:
		if v.Header == nil || v.Value == nil || *v.Value == "" {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "Header Auth needs both header and a non-empty value")
		}
		name := http.CanonicalHeaderKey(*v.Header)
		if !headerName.MatchString(*v.Header) {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "header: not an HTTP header name")
		}
		if reservedHeaders[name] {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "header: %s is set by ordo on every call; pick another name", name)
		}
		if strings.ContainsAny(*v.Value, "\r\n\x00") {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "value: must be one line")
		}
		return HandlerAuth{Header: name, Value: *v.Value}, nil
	case basic:
		if v.BasicUser == nil || v.BasicPassword == nil || *v.BasicUser == "" {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "Basic Auth needs both basic_user (non-empty) and basic_password")
		}
		if strings.Contains(*v.BasicUser, ":") {
			return HandlerAuth{}, invalid(HandlerAuthCredential, "basic_user: must not contain ':'")
		}
		return HandlerAuth{BasicUser: *v.BasicUser, BasicPassword: *v.BasicPassword}, nil
	}
	return HandlerAuth{}, invalid(HandlerAuthCredential, `want {"header": "<name>", "value": "<secret>"} (Header Auth) or {"basic_user": "…", "basic_password": "…"} (Basic Auth)`)
}

// Apply sets the auth on a handler call.
func (a HandlerAuth) Apply(req *http.Request) {
	switch {
	case a.Header != "":
		req.Header.Set(a.Header, a.Value)
	case a.BasicUser != "":
		req.SetBasicAuth(a.BasicUser, a.BasicPassword)
	}
}

// kind names the auth without its secret.
func (a HandlerAuth) kind() string {
	switch {
	case a.Header != "":
		return "header " + a.Header
	case a.BasicUser != "":
		return "basic"
	}
	return "none"
}

// String shows the kind of auth, never its secret.
func (a HandlerAuth) String() string { return "HandlerAuth(" + a.kind() + ")" }

// GoString keeps %#v from printing the secret.
func (a HandlerAuth) GoString() string { return "tenants.HandlerAuth{" + a.kind() + ", <redacted>}" }

// LogValue logs the kind of auth, never its secret.
func (a HandlerAuth) LogValue() slog.Value { return slog.StringValue(a.kind()) }

// MarshalJSON writes the kind only.
func (a HandlerAuth) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"kind": a.kind()})
}

// HandlerAuth returns the tenant's handler auth; nil when it has none.
// ErrUnreadable when it is stored but cannot be opened or read.
func (s *Store) HandlerAuth(ctx context.Context, tenantID int64) (*HandlerAuth, error) {
	return s.HandlerAuthOn(ctx, s.pool, tenantID)
}

// HandlerAuthOn is HandlerAuth read through q (a drain's own connection).
func (s *Store) HandlerAuthOn(ctx context.Context, q Querier, tenantID int64) (*HandlerAuth, error) {
	if s.vault == nil {
		return nil, errors.New("read handler auth: no credential vault configured")
	}
	raw, err := s.vault.GetOn(ctx, q, tenantID, HandlerAuthCredential)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read handler auth: %w", err)
	}
	a, err := ParseHandlerAuth(raw)
	if err != nil {
		return nil, fmt.Errorf("read handler auth of tenant %d: %w: %w", tenantID, err, ErrUnreadable)
	}
	return &a, nil
}
