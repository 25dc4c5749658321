package web

// The admin page is the operator's view across tenants: who is configured,
// which conversations need attention, what happened to recent messages, the
// open dead letters with Replay and Skip, and — under ordo dev — what the
// sandbox channel "sent". It is plain HTML, CSS and a little vanilla JS
// embedded in the binary (no build step, no CDN) on top of a few JSON
// endpoints under /admin/api/.
//
// Everything under /admin sits behind HTTP basic auth with
// Config.AdminPassword. Because browsers replay basic credentials on
// cross-site requests too, the state-changing endpoints are POST-only and
// require the X-Ordo-Admin header the page's fetch sets (a cross-site form
// cannot set it, and a cross-site fetch that does is stopped by CORS) and,
// when the browser sends one, a same-host Origin.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
)

//go:embed admin
var adminAssets embed.FS

// adminHeader must be set (to "1") on every state-changing admin request.
const adminHeader = "X-Ordo-Admin"

// routeAdmin mounts the admin page. Every path under /admin is authenticated
// before it is routed, so not even a 404 or 405 answers a stranger.
func (s *Server) routeAdmin(r *mux.Router) {
	a := mux.NewRouter().UseEncodedPath()
	a.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "no such endpoint"))
	})
	a.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &engine.Error{Code: codeMethodNotAllowed, Message: "method not allowed"})
	})
	static, _ := fs.Sub(adminAssets, "admin")
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, "index.html") })
	a.Handle("/admin", page).Methods(http.MethodGet, http.MethodHead)
	a.Handle("/admin/", page).Methods(http.MethodGet, http.MethodHead)
	for _, name := range []string{"admin.js", "admin.css", "favicon.svg"} {
		a.HandleFunc("/admin/"+name, func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, name) }).
			Methods(http.MethodGet, http.MethodHead)
	}
	a.HandleFunc("/admin/api/overview", s.adminOverview).Methods(http.MethodGet)
	a.Handle("/admin/api/dead-letters/{id}/replay", s.adminWrite(s.adminResolve(s.engine.Replay))).Methods(http.MethodPost)
	a.Handle("/admin/api/dead-letters/{id}/skip", s.adminWrite(s.adminResolve(s.engine.Skip))).Methods(http.MethodPost)
	s.routeAdminConsole(a)
	r.PathPrefix("/admin").Handler(s.adminAuth(a))
}

// adminAuth checks the basic-auth password (any user name). Both sides are
// hashed first so the comparison takes the same time whatever the lengths.
// Failures count against the client's address (throttle.go): past the limit
// the answer is 429 with Retry-After, even for the right password.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(s.cfg.AdminPassword))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := "admin:" + s.clientAddr(r)
		if wait := s.throttle.blocked(addr); wait > 0 {
			s.tooManyFailures(w, r, wait)
			return
		}
		_, password, ok := r.BasicAuth()
		got := sha256.Sum256([]byte(password))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok {
			s.throttle.fail(addr)
			w.Header().Set("WWW-Authenticate", `Basic realm="ordo admin", charset="UTF-8"`)
			s.writeError(w, r, engine.Errorf(engine.CodeUnauthorized, "admin password required (HTTP basic auth, any user name)"))
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// adminActor names the operator in the audit log: the basic-auth user name
// (the password is shared, so the name is what they say they are).
func adminActor(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return engine.AdminActor(user)
}

// adminWrite is the anti-CSRF check of state-changing admin endpoints. The
// custom header alone stops forged requests (another site can only send it
// through a CORS preflight, which is never granted); the Origin check is a
// second line. Behind a proxy that rewrites Host, X-Forwarded-Host names the
// host the browser saw, believed only from Config.TrustedProxies: any client
// can send the header.
func (s *Server) adminWrite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(adminHeader) != "1" {
			s.writeError(w, r, engine.Errorf(codeForbidden, "%s: 1 header required", adminHeader))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			sameHost := err == nil && u.Host != "" &&
				(u.Host == r.Host || s.fromTrustedProxy(r) && u.Host == r.Header.Get("X-Forwarded-Host"))
			if !sameHost {
				s.writeError(w, r, engine.Errorf(codeForbidden, "cross-origin request refused"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// adminFile serves an embedded asset with headers that keep the page to its
// own scripts and styles and out of other sites' frames.
func (s *Server) adminFile(w http.ResponseWriter, r *http.Request, static fs.FS, name string) {
	body, err := fs.ReadFile(static, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	types := map[string]string{
		"index.html":  "text/html; charset=utf-8",
		"admin.js":    "text/javascript; charset=utf-8",
		"admin.css":   "text/css; charset=utf-8",
		"favicon.svg": "image/svg+xml",
	}
	h := w.Header()
	h.Set("Content-Type", types[name])
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func (s *Server) adminOverview(w http.ResponseWriter, r *http.Request) {
	o, err := s.engine.AdminOverview(r.Context(), s.cfg.Sandbox)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// adminResolve replays or skips a dead letter of any tenant (tenant 0 is the
// operator) and answers with its new state, without the message's payload.
func (s *Server) adminResolve(resolve func(ctx context.Context, tenantID int64, id, actor string) (engine.DeadLetter, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := resolve(r.Context(), 0, pathVar(r, "id"), adminActor(r))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.logger.InfoContext(r.Context(), "admin resolved a dead letter",
			slog.String("tenant", d.Tenant), slog.String("dead_letter_id", d.ID), slog.String("resolution", d.Resolution))
		d.Payload = nil
		writeJSON(w, http.StatusOK, d)
	})
}
