package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

type tenantKey struct{}

// authenticate resolves the tenant from the Bearer API key: the tenant never
// comes from the URL or the body.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			s.writeError(w, r, engine.Errorf(engine.CodeUnauthorized, "Authorization: Bearer <API key> required"))
			return
		}
		t, err := s.tenants.Authenticate(r.Context(), key)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if rw, ok := w.(*statusWriter); ok {
			rw.tenant = t.Slug
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, t)))
	})
}

// bearer returns the credentials of an "Authorization: Bearer <key>"
// header; the scheme name is case-insensitive (RFC 7235).
func bearer(h string) (string, bool) {
	scheme, key, ok := strings.Cut(strings.TrimSpace(h), " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", false
	}
	return key, true
}

func tenantOf(r *http.Request) tenants.Tenant {
	t, _ := r.Context().Value(tenantKey{}).(tenants.Tenant)
	return t
}

// readJSONBody reads a JSON request body under limit: 415 if it is not JSON,
// 413 if it is too large, 400 if it is not valid UTF-8.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, engine.Errorf(engine.CodeUnsupported, "Content-Type must be application/json")
		}
	} else {
		return nil, engine.Errorf(engine.CodeUnsupported, "Content-Type must be application/json")
	}
	return readBody(w, r, limit)
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, engine.Errorf(engine.CodeTooLarge, "body larger than %d bytes", limit)
	}
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalid, "body: could not be read")
	}
	if !utf8.Valid(body) {
		return nil, engine.Errorf(engine.CodeInvalid, "body: not valid UTF-8")
	}
	return body, nil
}

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
	tenant string
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs one line per request: never bodies, keys or queries.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		level := slog.LevelDebug
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		s.logger.Log(r.Context(), level, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.EscapedPath()), slog.Int("status", sw.status),
			slog.String("tenant", sw.tenant), slog.Duration("duration", time.Since(start)))
	})
}
