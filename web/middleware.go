package web

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

type (
	tenantKey    struct{}
	uncheckedKey struct{} // the SHA-256 of a key this request did not look up
)

// authenticate resolves the tenant from the Bearer API key: the tenant never
// comes from the URL or the body. Failures are counted per client address
// only, never per key prefix (throttle.go): past the limit the address is
// answered 429 before any lookup.
func (s *Server) authenticate(next http.Handler) http.Handler { return s.authenticateKey(next, false) }

// authenticateIngest is authenticate for POST /v1/messages, the API's hot
// path: a key that authenticated within Config.KeyReuse is not looked up
// again before the body is read. The request carries its hash instead
// (keyToCheck), and the transaction that stores the message checks it
// (engine.NewMessage.KeyHash): a key revoked since is refused with 401 and
// nothing is stored, at one database round trip per message fewer (issue
// 11, `make bench` spread).
func (s *Server) authenticateIngest(next http.Handler) http.Handler {
	return s.authenticateKey(next, true)
}

func (s *Server) authenticateKey(next http.Handler, reuse bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r.Header.Get("Authorization"))
		addr := "addr:" + s.clientAddr(r)
		hash := sha256.Sum256([]byte(key))
		if wait := s.throttle.blocked(addr); wait > 0 && !s.good.known(hash) {
			s.tooManyFailures(w, r, wait)
			return
		}
		if !ok {
			s.throttle.fail(addr)
			s.writeError(w, r, engine.Errorf(engine.CodeUnauthorized, "Authorization: Bearer <API key> required"))
			return
		}
		if t, ok := s.recent.get(hash); reuse && ok {
			ctx := context.WithValue(context.WithValue(r.Context(), tenantKey{}, t), uncheckedKey{}, hash)
			if rw, ok := w.(*statusWriter); ok {
				rw.tenant = t.Slug
			}
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		t, err := s.tenants.Authenticate(r.Context(), key)
		if errors.Is(err, tenants.ErrUnauthorized) {
			s.throttle.fail(addr)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.good.put(hash, struct{}{})
		s.recent.put(hash, t)
		if rw, ok := w.(*statusWriter); ok {
			rw.tenant = t.Slug
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, t)))
	})
}

// tooManyFailures answers a throttled client: 429 with Retry-After.
func (s *Server) tooManyFailures(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfter(wait))
	s.writeError(w, r, engine.Errorf(engine.CodeRateLimited, "too many failed authentications from this client; retry after %s seconds", retryAfter(wait)))
}

// tooManyUnsigned answers a webhook sender past its failed signatures:
// 429 with Retry-After, its body unread. The connection is closed after
// the answer (closeUnread), or the server would read (and drop) up to 256
// KiB of a chunked body to keep it open.
func (s *Server) tooManyUnsigned(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfter(wait))
	closeUnread(w)
	s.writeError(w, r, engine.Errorf(engine.CodeRateLimited, "too many webhook requests without a valid %s or verify token from this client; retry after %s seconds", signatureHeader, retryAfter(wait)))
}

// keyPrefix returns the public prefix of an API key shaped
// ordo_<prefix>_<secret>, or "" for anything else.
func keyPrefix(key string) string {
	const scheme, n = "ordo_", 8
	if len(key) <= len(scheme)+n || !strings.HasPrefix(key, scheme) || key[len(scheme)+n] != '_' {
		return ""
	}
	p := key[len(scheme) : len(scheme)+n]
	for _, c := range []byte(p) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return ""
		}
	}
	return p
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

// keyToCheck is the hash of the request's API key when authenticateIngest
// did not look it up (nil when it did).
func keyToCheck(r *http.Request) []byte {
	h, ok := r.Context().Value(uncheckedKey{}).([32]byte)
	if !ok {
		return nil
	}
	return h[:]
}

// readJSONBody reads a JSON request body under limit: 415 if it is not JSON,
// 413 if it is too large, 400 if it is not valid UTF-8 or escapes a lone
// surrogate.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, engine.Errorf(engine.CodeUnsupported, "Content-Type must be application/json")
		}
	} else {
		return nil, engine.Errorf(engine.CodeUnsupported, "Content-Type must be application/json")
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		return nil, err
	}
	if err := checkText(body); err != nil {
		return nil, err
	}
	return body, nil
}

// readBody reads a body of at most limit bytes: 413 as soon as a declared
// length is over it, without reading.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, engine.Errorf(engine.CodeTooLarge, "body larger than %d bytes", limit)
	}
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

// statusWriter remembers the status for the request log and the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	tenant string
	route  string // the matched route's template (routeTemplate), if any
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
		defer s.cfg.Metrics.HTTPStarted()()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		level := slog.LevelDebug
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		elapsed := time.Since(start)
		s.logger.Log(r.Context(), level, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.EscapedPath()), slog.Int("status", sw.status),
			slog.String("tenant", sw.tenant), slog.Duration("duration", elapsed))
		s.cfg.Metrics.HTTP(sw.route, r.Method, sw.status, elapsed)
		if sw.route == webhookRoute && r.Method == http.MethodPost {
			s.cfg.Metrics.Webhook(sw.status)
		}
	})
}

// routeTemplate tells logRequests which route matched, by its template
// (the path itself holds ids, which no metric label may).
func routeTemplate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			if route := mux.CurrentRoute(r); route != nil {
				sw.route, _ = route.GetPathTemplate()
			}
		}
		next.ServeHTTP(w, r)
	})
}
