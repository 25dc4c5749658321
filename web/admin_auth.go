package web

// Console login: a name and password (an operator of ordo.operators, or
// "admin" with Config.AdminPassword, the break-glass account) exchanged
// for a session cookie. Failed logins count against the client's address
// (throttle.go): past the limit the answer is 429 with Retry-After, even
// for the right password.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
)

// sessionCookie holds the console session's token.
const sessionCookie = "ordo_session"

// loginBodyLimit bounds a login form, read before anyone is known.
const loginBodyLimit = 4 << 10

type sessionKey struct{}

// sessionOf is the request's console session (set by adminAuth).
func sessionOf(r *http.Request) engine.Session {
	s, _ := r.Context().Value(sessionKey{}).(engine.Session)
	return s
}

// adminActor names the logged-in operator in the audit log.
func adminActor(r *http.Request) string { return engine.AdminActor(sessionOf(r).Operator) }

// adminAuth lets through only requests with a live session.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.session(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	})
}

func (s *Server) session(r *http.Request) (engine.Session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return engine.Session{}, engine.ErrNoSession
	}
	sess, err := s.engine.SessionOf(r.Context(), c.Value, s.cfg.AdminSessionIdle)
	if err != nil {
		return engine.Session{}, err
	}
	// A break-glass session ends with the password that opened it.
	if sess.BreakGlass && s.cfg.AdminPassword == "" {
		return engine.Session{}, engine.ErrNoSession
	}
	return sess, nil
}

// secureCookies: the browser reached us over TLS, directly or through a
// trusted proxy that says so.
func (s *Server) secureCookies(r *http.Request) bool {
	return r.TLS != nil || s.fromTrustedProxy(r) && r.Header.Get("X-Forwarded-Proto") == "https"
}

func (s *Server) adminLogin(w http.ResponseWriter, r *http.Request) {
	addr := "login:" + s.clientAddr(r)
	if wait := s.throttle.blocked(addr); wait > 0 {
		s.tooManyFailures(w, r, wait)
		return
	}
	var in struct {
		Name     string `json:"name"`
		Password string `json:"password"`
	}
	body, err := readJSONBody(w, r, loginBodyLimit)
	if err == nil {
		err = decodeAdminJSON(body, &in)
	}
	if err == nil && (in.Name == "" || in.Password == "") {
		err = engine.Errorf(engine.CodeInvalid, "name and password: required")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var (
		operatorID int64
		role       = engine.RoleAdmin
	)
	if in.Name == engine.BreakGlassOperator {
		want := sha256.Sum256([]byte(s.cfg.AdminPassword))
		got := sha256.Sum256([]byte(in.Password))
		if s.cfg.AdminPassword == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			err = engine.ErrBadLogin
		}
	} else {
		var o engine.Operator
		o, err = s.engine.CheckOperatorLogin(r.Context(), in.Name, in.Password)
		operatorID, role = o.ID, o.Role
	}
	if err != nil {
		if engine.ErrorCode(err) == engine.CodeUnauthorized {
			s.throttle.fail(addr)
		}
		s.writeError(w, r, err)
		return
	}
	token, err := s.engine.StartSession(r.Context(), operatorID, s.cfg.AdminSessionMax)
	if err == nil {
		// Who could act, and since when: the audit names every login.
		err = s.engine.Tx(r.Context(), func(tx pgx.Tx) error {
			return engine.Audit(r.Context(), tx, engine.AuditEntry{Actor: engine.AdminActor(in.Name), Action: "operator.login",
				Details: details(map[string]string{"role": role, "address": s.clientAddr(r)})})
		})
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: token, Path: "/admin", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secureCookies(r), MaxAge: int(s.cfg.AdminSessionMax / time.Second)})
	s.logger.InfoContext(r.Context(), "operator logged in", slog.String("operator", in.Name), slog.String("role", role))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, engine.Session{Operator: in.Name, Role: role, BreakGlass: operatorID == 0})
}

func (s *Server) adminLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := s.engine.EndSession(r.Context(), c.Value); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/admin", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secureCookies(r), MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
}

// adminMe says who is logged in, with which role; {"operator": ""} when
// nobody is (the page then shows its login form, without a 401 to log).
func (s *Server) adminMe(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	sess, err := s.session(r)
	if err != nil && engine.ErrorCode(err) != engine.CodeUnauthorized {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}
