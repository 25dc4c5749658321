package web_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/web"
)

// Roles are enforced by the server: a viewer reads and is refused every
// write (403, nothing done, nothing audited); an operator replays, skips,
// pauses and resumes but may not onboard or change settings, credentials
// or keys; an admin may.
func TestAdminRoles(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{NoStart: true}})
	viewer := e.operator(t, "vera", engine.RoleViewer)
	operator := e.operator(t, "otto", engine.RoleOperator)
	admin := e.operator(t, "ada", engine.RoleAdmin)
	w := func(h http.Header) http.Header { return withHeader(h, "X-Ordo-Admin", "1") }
	writes := []struct {
		path, body, role string
	}{
		{"/admin/api/dead-letters/424242/replay", "", engine.RoleOperator},
		{"/admin/api/dead-letters/424242/skip", "", engine.RoleOperator},
		{"/admin/api/dead-letters/bulk", `{"action":"replay","tenant":"nobody"}`, engine.RoleOperator},
		{"/admin/api/tenants/acme/pause", `{"reason":"x"}`, engine.RoleOperator},
		{"/admin/api/tenants/acme/resume", `{}`, engine.RoleOperator},
		{"/admin/api/tenants", `{"slug":"forged"}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/settings", `{"max_attempts":2}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":"1"}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/credentials/handler_auth", `{"header":"X-A","value":"v"}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/credentials/whatsapp/delete", `{}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/api-keys", `{}`, engine.RoleAdmin},
		{"/admin/api/tenants/acme/api-keys/AAAAAAAA/revoke", `{}`, engine.RoleAdmin},
	}
	before := e.Count(`SELECT count(*) FROM ordo.audit_log`)
	for _, c := range writes {
		refused := []http.Header{viewer}
		if c.role == engine.RoleAdmin {
			refused = append(refused, operator)
		}
		for i, h := range refused {
			a := e.call(t, request{method: http.MethodPost, path: c.path, header: w(h), body: c.body})
			mustError(t, c.path+" by "+[]string{"a viewer", "an operator"}[i], a, http.StatusForbidden, "forbidden")
			if msg := string(a.body); !strings.Contains(msg, "needs the "+c.role+" role") {
				t.Errorf("%s: %s, want it to name the role needed", c.path, msg)
			}
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log`); n != before {
		t.Errorf("refused writes left %d audit entries", n-before)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.tenants t JOIN ordo.credentials c ON c.tenant_id = t.id WHERE t.slug = 'acme' AND c.name = 'whatsapp'`); n != 1 {
		t.Errorf("a refused delete removed the credential")
	}
	// Reads are for everyone logged in.
	for _, path := range []string{"/admin/api/overview", "/admin/api/tenants", "/admin/api/tenants/acme", "/admin/api/messages?q=x",
		"/admin/api/dead-letters", "/admin/api/audit", "/admin/api/tiles"} {
		mustStatus(t, path+" by a viewer", e.call(t, request{method: http.MethodGet, path: path, header: viewer}), http.StatusOK)
	}
	mustStatus(t, "pause by an operator", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/pause", header: w(operator), body: `{"reason":"x"}`}), 200)
	mustStatus(t, "resume by an operator", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/resume", header: w(operator), body: `{}`}), 200)
	mustStatus(t, "settings by an admin", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/settings", header: w(admin), body: `{"max_attempts":2}`}), 200)
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE actor IN ('admin:otto', 'admin:ada') AND action IN ('tenant.pause', 'tenant.resume', 'tenant.update')`); n != 3 {
		t.Errorf("%d audit entries name otto and ada, want 3", n)
	}
}

// A session is a cookie (HttpOnly, SameSite=Strict, Secure behind TLS)
// whose token is stored only as a hash; it ends at logout, when idle, and
// when its operator is removed. The handler auth is set from the console
// and shown by kind only.
func TestAdminSessions(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword, AdminSessionIdle: time.Minute,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, jobs: jobstest.Options{NoStart: true}})
	ctx := context.Background()
	if _, err := e.Engine.AddOperator(ctx, "sam", engine.RoleAdmin, "sam-password-12", engine.ActorCLI); err != nil {
		t.Fatal(err)
	}
	login := func(name, password string, h http.Header) answer {
		return e.call(t, request{method: http.MethodPost, path: "/admin/login", header: withHeader(h, "X-Ordo-Admin", "1"), body: loginBody(name, password)})
	}
	for name, c := range map[string]struct{ name, password string }{
		"wrong password": {"sam", "sam-password-13"}, "unknown name": {"nobody", "sam-password-12"},
		"break-glass with sam's password": {"admin", "sam-password-12"}, "sam with the break-glass password": {"sam", adminPassword},
	} {
		mustError(t, name, login(c.name, c.password, nil), 401, "unauthorized")
	}
	mustError(t, "login without the header", e.call(t, request{method: http.MethodPost, path: "/admin/login", body: loginBody("sam", "sam-password-12")}), 403, "forbidden")
	mustError(t, "login, not JSON", e.call(t, request{method: http.MethodPost, path: "/admin/login", header: http.Header{"X-Ordo-Admin": {"1"}}, body: "name=sam"}), 400, "invalid_request")
	mustError(t, "login, no password", login("sam", "", nil), 400, "invalid_request")
	mustError(t, "login, extra field", e.call(t, request{method: http.MethodPost, path: "/admin/login", header: http.Header{"X-Ordo-Admin": {"1"}}, body: `{"name":"sam","password":"x","role":"admin"}`}), 400, "invalid_request")

	a := login("sam", "sam-password-12", http.Header{"X-Forwarded-Proto": {"https"}})
	mustStatus(t, "login", a, 200)
	cookie := a.header.Get("Set-Cookie")
	for _, want := range []string{"ordo_session=", "Path=/admin", "HttpOnly", "SameSite=Strict", "Secure"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("cookie %q lacks %s", cookie, want)
		}
	}
	if plain := login("sam", "sam-password-12", nil).header.Get("Set-Cookie"); strings.Contains(plain, "Secure") {
		t.Errorf("a cookie over plain HTTP is Secure, which the browser would drop: %q", plain)
	}
	sess := sessionFrom(t, a)
	token := strings.TrimPrefix(sess.Get("Cookie"), "ordo_session=")
	hash := sha256.Sum256([]byte(token))
	if n := e.Count(`SELECT count(*) FROM ordo.operator_sessions WHERE token_hash = $1`, hash[:]); n != 1 {
		t.Errorf("the session's token hash is stored %d times", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.operator_sessions WHERE encode(token_hash, 'escape') LIKE '%' || $1 || '%'`, token); n != 0 {
		t.Errorf("the token itself is stored")
	}
	me := e.call(t, request{method: http.MethodGet, path: "/admin/session", header: sess})
	if s := decode[engine.Session](t, me); s.Operator != "sam" || s.Role != engine.RoleAdmin {
		t.Errorf("session %+v", s)
	}

	// Handler auth from the console: written, shown by kind, never echoed.
	write := withHeader(sess, "X-Ordo-Admin", "1")
	const secret = "n8n-header-secret-value"
	for _, bad := range []string{`{"header":"X-Auth"}`, `{"header":"X-Auth","value":"v","basic_user":"u","basic_password":"p"}`, `[1]`, `{"header":"Bad Header","value":"v"}`} {
		mustError(t, "handler auth "+bad, e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/credentials/handler_auth", header: write, body: bad}), 400, "invalid_request")
	}
	mustError(t, "handler auth of another tenant", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/nobody/credentials/handler_auth", header: write, body: `{"header":"X-Auth","value":"v"}`}), 404, "not_found")
	a = e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/credentials/handler_auth", header: write, body: `{"header":"X-Auth","value":"` + secret + `"}`})
	mustStatus(t, "set handler auth", a, 200)
	v := e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants/acme", header: sess})
	if !strings.Contains(string(v.body), `"handler_auth":"header"`) || !strings.Contains(string(v.body), `"handler_auth_header":"X-Auth"`) || strings.Contains(string(v.body)+string(a.body), secret) {
		t.Errorf("tenant view after setting handler auth: %s", v.body)
	}
	mustStatus(t, "delete handler auth", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/credentials/handler_auth/delete", header: write, body: `{}`}), 200)
	mustError(t, "delete it again", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/credentials/handler_auth/delete", header: write, body: `{}`}), 404, "not_found")
	mustError(t, "delete an unknown credential", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants/acme/credentials/other/delete", header: write, body: `{}`}), 400, "invalid_request")

	// Logout ends the session on the server, not only in the browser.
	mustStatus(t, "logout", e.call(t, request{method: http.MethodPost, path: "/admin/logout", header: write}), 200)
	mustError(t, "after logout", e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: sess}), 401, "unauthorized")

	// Used within AdminSessionIdle: kept; idle past it: gone.
	idle := e.login(t, "sam", "sam-password-12")
	idleHash := sha256.Sum256([]byte(strings.TrimPrefix(idle.Get("Cookie"), "ordo_session=")))
	age := func(d string) {
		if _, err := e.Pool.Exec(ctx, `UPDATE ordo.operator_sessions SET last_seen_at = now() - $2::interval WHERE token_hash = $1`, idleHash[:], d); err != nil {
			t.Fatal(err)
		}
	}
	age("50 seconds")
	mustStatus(t, "used within the idle time", e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: idle}), 200)
	if n := e.Count(`SELECT count(*) FROM ordo.operator_sessions WHERE token_hash = $1 AND last_seen_at > now() - interval '10 seconds'`, idleHash[:]); n != 1 {
		t.Errorf("a request did not refresh the session's idle clock")
	}
	age("61 seconds")
	mustError(t, "idle", e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: idle}), 401, "unauthorized")

	// Removing an operator ends their sessions at once.
	live := e.login(t, "sam", "sam-password-12")
	if err := e.Engine.RemoveOperator(ctx, "sam", engine.ActorCLI); err != nil {
		t.Fatal(err)
	}
	mustError(t, "removed operator", e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: live}), 401, "unauthorized")
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE action = 'operator.login' AND actor = 'admin:sam'`); n != 4 {
		t.Errorf("%d logins of sam audited, want 4", n)
	}
}
