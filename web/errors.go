package web

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/ordo-dev/ordo/engine"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

// Codes only the web layer uses: a route's wrong method, and an admin write
// without the page's anti-CSRF header.
const (
	codeMethodNotAllowed engine.Code = "method_not_allowed"
	codeForbidden        engine.Code = "forbidden"
)

// statuses is the one place error codes become HTTP statuses.
var statuses = map[engine.Code]int{
	engine.CodeInvalid:       http.StatusBadRequest,
	engine.CodeUnauthorized:  http.StatusUnauthorized,
	engine.CodeNotFound:      http.StatusNotFound,
	engine.CodeConflict:      http.StatusConflict,
	engine.CodeNotWaiting:    http.StatusConflict,
	engine.CodeReused:        http.StatusUnprocessableEntity,
	engine.CodeOutsideWindow: http.StatusUnprocessableEntity,
	engine.CodeTooLarge:      http.StatusRequestEntityTooLarge,
	engine.CodeUnsupported:   http.StatusUnsupportedMediaType,
	engine.CodeRateLimited:   http.StatusTooManyRequests,
	engine.CodeUnavailable:   http.StatusServiceUnavailable,
	engine.CodeInternal:      http.StatusInternalServerError,
	codeMethodNotAllowed:     http.StatusMethodNotAllowed,
	codeForbidden:            http.StatusForbidden,
}

// schemaChanged is the answer to a request that failed on a schema this
// build was not written for (ordosql.SchemaChanged).
const schemaChanged = "the service is being upgraded; retry shortly"

// asEngineError brings the tenants package's errors into the one error type.
func asEngineError(err error) *engine.Error {
	var e *engine.Error
	if errors.As(err, &e) {
		return e
	}
	var inv *tenants.InvalidError
	switch {
	case ordosql.Unavailable(err):
		return &engine.Error{Code: engine.CodeUnavailable, Message: engine.DatabaseUnavailable, Err: err}
	case ordosql.SchemaChanged(err):
		return &engine.Error{Code: engine.CodeUnavailable, Message: schemaChanged, Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &engine.Error{Code: engine.CodeUnavailable, Message: "request cancelled or timed out", Err: err}
	case errors.As(err, &inv):
		return &engine.Error{Code: engine.CodeInvalid, Message: inv.Error(), Err: err}
	case errors.Is(err, tenants.ErrUnauthorized):
		return &engine.Error{Code: engine.CodeUnauthorized, Message: "missing, unknown or revoked API key", Err: err}
	case errors.Is(err, tenants.ErrNotFound):
		return &engine.Error{Code: engine.CodeNotFound, Message: "not found", Err: err}
	case errors.Is(err, tenants.ErrExists):
		return &engine.Error{Code: engine.CodeConflict, Message: "already exists", Err: err}
	}
	return &engine.Error{Code: engine.CodeInternal, Message: "internal error", Err: err}
}

// writeError renders err as {"error":{"code","message"}}; 5xx bodies say
// nothing about internals, which go to the log instead.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := asEngineError(err)
	if e.Code == engine.CodeInternal && ordosql.Unavailable(e.Err) {
		e = &engine.Error{Code: engine.CodeUnavailable, Message: engine.DatabaseUnavailable, Err: err}
	}
	if e.Code == engine.CodeInternal && ordosql.SchemaChanged(e.Err) {
		e = &engine.Error{Code: engine.CodeUnavailable, Message: schemaChanged, Err: err}
	}
	// Postgres away, or a deploy under way (the newer build's processes
	// answer soon): each logged once, by its watch (a nil watch: each
	// time), and a client that retries comes back after the workers' own
	// backoff (outage.BackoffMaxDefault), not in a tight loop.
	quiet := e.Message == engine.DatabaseUnavailable
	if e.Message == schemaChanged {
		quiet = s.cfg.Schema != nil
		s.cfg.Schema.Report(e.Err, ordosql.SchemaChanged)
	}
	if e.Message == engine.DatabaseUnavailable || e.Message == schemaChanged {
		w.Header().Set("Retry-After", "5")
	}
	status, ok := statuses[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	msg := e.Message
	if status >= 500 && !quiet {
		s.logger.ErrorContext(r.Context(), "request failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		if e.Code == engine.CodeInternal {
			msg = "internal error"
		}
	}
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1") // a client (n8n's Retry On Fail) comes back, not at once
	}
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" && strings.HasPrefix(r.URL.Path, "/v1/") {
		// RFC 9110: a 401 names the scheme that would work.
		w.Header().Set("WWW-Authenticate", `Bearer realm="ordo"`)
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": string(e.Code), "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
