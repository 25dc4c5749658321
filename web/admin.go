package web

// The admin console is the operators' view across tenants: an overview
// with live numbers, messages (search by id prefix), a page per message
// and per conversation, dead letters with bulk replay and skip, tenants
// with their settings, credentials and keys, and the audit log. It is
// plain HTML, CSS and vanilla JS embedded in the binary (no build step, no
// CDN), routed in the browser by the URL's fragment (#/messages?q=…), on
// top of JSON endpoints under /admin/api/.
//
// Operators log in with a name and password (admin_auth.go): the session
// is a cookie (HttpOnly, SameSite=Strict, Secure over TLS) whose token is
// kept hashed in Postgres. Every API path needs a session, and every write
// a role: a viewer reads, an operator also replays, skips, pauses and
// resumes, an admin also onboards and changes settings, credentials and
// keys. As a second line against cross-site requests, the state-changing
// endpoints are POST-only and require the X-Ordo-Admin header the page's
// fetch sets and, when the browser sends one, a same-host Origin.

import (
	"context"
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

// routeAdmin mounts the console. The page and its assets are public (they
// hold no data); the login is throttled; everything else under /admin
// needs a session before it is routed, so not even a 404 or 405 answers a
// stranger.
func (s *Server) routeAdmin(r *mux.Router) {
	a := mux.NewRouter().UseEncodedPath()
	a.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "no such endpoint"))
	})
	a.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &engine.Error{Code: codeMethodNotAllowed, Message: "method not allowed"})
	})
	a.HandleFunc("/admin/api/overview", s.adminOverview).Methods(http.MethodGet)
	a.Handle("/admin/api/dead-letters/{id}/replay", s.adminWrite(engine.RoleOperator, s.adminResolve(s.engine.Replay))).Methods(http.MethodPost)
	a.Handle("/admin/api/dead-letters/{id}/skip", s.adminWrite(engine.RoleOperator, s.adminResolve(s.engine.Skip))).Methods(http.MethodPost)
	s.routeAdminConsole(a)

	static, _ := fs.Sub(adminAssets, "admin")
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, "index.html") })
	r.Handle("/admin", page).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/admin/", page).Methods(http.MethodGet, http.MethodHead)
	for _, name := range []string{"admin.js", "admin.css", "favicon.svg"} {
		r.HandleFunc("/admin/"+name, func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, name) }).
			Methods(http.MethodGet, http.MethodHead)
	}
	r.HandleFunc("/admin/session", s.adminMe).Methods(http.MethodGet)
	r.Handle("/admin/login", s.adminSameOrigin(http.HandlerFunc(s.adminLogin))).Methods(http.MethodPost)
	r.Handle("/admin/logout", s.adminSameOrigin(http.HandlerFunc(s.adminLogout))).Methods(http.MethodPost)
	r.PathPrefix("/admin").Handler(s.adminAuth(a))
}

// adminWrite lets a write through for a session with at least role
// (403 otherwise) that passes the anti-CSRF checks.
func (s *Server) adminWrite(role string, next http.Handler) http.Handler {
	return s.adminSameOrigin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sess := sessionOf(r); !engine.RoleAtLeast(sess.Role, role) {
			s.writeError(w, r, engine.Errorf(codeForbidden, "a %s may not do this: it needs the %s role", sess.Role, role))
			return
		}
		next.ServeHTTP(w, r)
	}))
}

// adminSameOrigin is the anti-CSRF check of state-changing console
// endpoints. The custom header alone stops forged requests (another site
// can only send it through a CORS preflight, which is never granted; the
// cookie is SameSite=Strict besides); the Origin check is a further line.
// Behind a proxy that rewrites Host, X-Forwarded-Host names the host the
// browser saw, believed only from Config.TrustedProxies: any client can
// send the header.
func (s *Server) adminSameOrigin(next http.Handler) http.Handler {
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
