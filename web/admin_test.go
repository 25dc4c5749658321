package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/web"
)

const adminPassword = "correct horse battery staple"

// sessionFrom is a Cookie header with the console session an answer set.
func sessionFrom(t testing.TB, a answer) http.Header {
	t.Helper()
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == "ordo_session" && c.Value != "" {
			return http.Header{"Cookie": {c.Name + "=" + c.Value}}
		}
	}
	t.Fatalf("no session cookie in %d %s", a.status, a.body)
	return nil
}

func loginBody(name, password string) string {
	b, _ := json.Marshal(map[string]string{"name": name, "password": password})
	return string(b)
}

// login logs name in to the console and returns the session's Cookie header.
func (e *env) login(t *testing.T, name, password string) http.Header {
	t.Helper()
	a := e.call(t, request{method: http.MethodPost, path: "/admin/login", header: http.Header{"X-Ordo-Admin": {"1"}}, body: loginBody(name, password)})
	mustStatus(t, "login "+name, a, http.StatusOK)
	return sessionFrom(t, a)
}

// operator adds a console operator and logs them in.
func (e *env) operator(t *testing.T, name, role string) http.Header {
	t.Helper()
	if _, err := e.Engine.AddOperator(context.Background(), name, role, name+"-password-1", engine.ActorCLI); err != nil {
		t.Fatal(err)
	}
	return e.login(t, name, name+"-password-1")
}

// basic is an HTTP basic Authorization header: the console no longer
// takes one (only a session), so it stands for a stranger's attempt.
func basic(user, password string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
	return h
}

// withHeader adds k: v to h (a copy).
func withHeader(h http.Header, k, v string) http.Header {
	if h = h.Clone(); h == nil {
		h = http.Header{}
	}
	h.Set(k, v)
	return h
}

// deadLetter posts an outbound message that the fake Cloud API refuses for
// good (131026) and returns its dead letter's id once it is there.
func (e *env) deadLetter(t *testing.T, messageID, conv string) string {
	t.Helper()
	mustStatus(t, "post "+messageID, e.post(t, e.APIKey, "/v1/messages", outbound(messageID, conv, "fail "+messageID)), http.StatusAccepted)
	e.waitStatus(t, e.APIKey, messageID, "dead")
	var id string
	if err := e.Pool.QueryRow(context.Background(),
		`SELECT d.id::text FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk WHERE m.message_id = $1`, messageID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func failPrefixed(req whatsapptest.Send, n int) whatsapptest.Response {
	if strings.HasPrefix(req.Text, "fail") {
		return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
	}
	return whatsapptest.Default(req, n)
}

// Without a password there is no admin page at all: 404, saying how to
// turn it on (the page for a browser, the error's message for the API).
func TestAdminDisabledWithoutPassword(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	for _, r := range []request{
		{method: http.MethodGet, path: "/admin/api/overview", header: basic("admin", "")},
		{method: http.MethodPost, path: "/admin/api/dead-letters/1/replay", header: withHeader(basic("admin", ""), "X-Ordo-Admin", "1")},
	} {
		a := e.call(t, r)
		mustError(t, r.method+" "+r.path, a, http.StatusNotFound, "not_found")
		if !strings.Contains(string(a.body), "ORDO_ADMIN_PASSWORD") {
			t.Errorf("%s %s: %s; want it to say how to turn the admin page on", r.method, r.path, a.body)
		}
	}
	for _, r := range []request{
		{method: http.MethodGet, path: "/admin"},
		{method: http.MethodGet, path: "/admin/", header: basic("admin", "")},
	} {
		a := e.call(t, r)
		if a.status != http.StatusNotFound || !strings.Contains(string(a.body), "ORDO_ADMIN_PASSWORD") || strings.Contains(string(a.body), "<script") {
			t.Errorf("GET %s with no admin password: %s; want 404 and a page naming ORDO_ADMIN_PASSWORD", r.path, a)
		}
	}
}

// Every admin path asks for the password first; writes also need the page's
// anti-CSRF header and a same-host origin; answers carry no secret.
func TestAdminAuthCSRFAndSecrets(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{HandlerURL: "https://n8n.example/webhook/0b9c-secret-path"}})
	e.WhatsApp.SetResponder(failPrefixed)
	dl := e.deadLetter(t, "adm-1", "c1")

	for name, h := range map[string]http.Header{
		"no credentials": nil,
		"wrong password": basic("admin", "wrong"),
		"empty password": basic("admin", ""),
		"password + 1":   basic("admin", adminPassword+"x"),
		"tenant API key": {"Authorization": {"Bearer " + e.APIKey}},
	} {
		for _, path := range []string{"/admin/api/overview", "/admin/api/tenants", "/admin/no-such-page"} {
			a := e.call(t, request{method: http.MethodGet, path: path, header: h})
			mustError(t, name+" "+path, a, http.StatusUnauthorized, "unauthorized")
		}
		a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/replay", header: withHeader(h, "X-Ordo-Admin", "1")})
		mustError(t, name+" replay", a, http.StatusUnauthorized, "unauthorized")
	}

	auth := e.login(t, "admin", adminPassword)
	page := e.call(t, request{method: http.MethodGet, path: "/admin", header: auth})
	mustStatus(t, "admin page", page, http.StatusOK)
	if ct := page.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("admin page Content-Type %q", ct)
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("admin page CSP %q: want own scripts only and no framing", csp)
	}
	for _, asset := range []string{"/admin/admin.js", "/admin/admin.css", "/admin/favicon.svg"} {
		mustStatus(t, asset, e.call(t, request{method: http.MethodGet, path: asset, header: auth}), http.StatusOK)
	}
	mustError(t, "unknown admin path", e.call(t, request{method: http.MethodGet, path: "/admin/no-such-page", header: auth}), 404, "not_found")
	mustError(t, "GET on a write", e.call(t, request{method: http.MethodGet, path: "/admin/api/dead-letters/" + dl + "/replay", header: auth}), 405, "method_not_allowed")

	// Forged writes: a form post from another site cannot set the header; a
	// script there that does carries its own Origin.
	for name, h := range map[string]http.Header{
		"without the header":  auth,
		"with a wrong header": withHeader(auth, "X-Ordo-Admin", "yes"),
		"from another origin": withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", "https://evil.example"),
		"from a null origin":  withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", "null"),
	} {
		for _, action := range []string{"replay", "skip"} {
			a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/" + action, header: h, contentType: "application/x-www-form-urlencoded", body: "x=1"})
			mustError(t, action+" "+name, a, http.StatusForbidden, "forbidden")
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Fatalf("a forged write resolved the dead letter (%d open)", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE action <> 'operator.login'`); n != 0 {
		t.Fatalf("refused writes left %d audit entries", n)
	}

	// The page's own write works, across tenants, once.
	write := withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", e.URL)
	a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/skip", header: write})
	mustStatus(t, "skip", a, http.StatusOK)
	if d := decode[engine.DeadLetter](t, a); d.Resolution != "skipped" || d.Tenant != "acme" || (len(d.Payload) != 0 && string(d.Payload) != "null") {
		t.Errorf("skip answered %s; want skipped, without the payload", a)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE actor = 'admin:admin' AND action = 'dead_letter.skip'
		AND dead_letter_id = $1::bigint AND tenant = 'acme' AND conversation_id = 'c1' AND message_id = 'adm-1'`, dl); n != 1 {
		t.Errorf("the skip left %d audit entries naming the operator, the tenant, the conversation and the message; want 1", n)
	}
	mustError(t, "second skip", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/skip", header: write}), 409, "conflict")
	mustError(t, "unknown dead letter", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/999999/replay", header: write}), 404, "not_found")
	mustError(t, "malformed id", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/1%27/replay", header: write}), 404, "not_found")
	if m := decode[engine.Message](t, e.get(t, e.APIKey, "/v1/messages/adm-1")); m.Status != "skipped" {
		t.Errorf("adm-1 after the admin's skip: %s", m.Status)
	}

	// The overview shows tenants' settings, not their secrets.
	mustStatus(t, "post", e.post(t, e.APIKey, "/v1/messages", outbound("adm-2", "c2", "body-visible-to-operator")), http.StatusAccepted)
	e.waitStatus(t, e.APIKey, "adm-2", "done")
	a = e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants", header: auth})
	mustStatus(t, "tenants", a, http.StatusOK)
	list := decode[struct{ Items []engine.AdminTenant }](t, a).Items
	if len(list) != 1 || list[0].Slug != "acme" || !list[0].HandlerURLSet || strings.Join(list[0].Credentials, ",") != "handler,whatsapp" ||
		list[0].SendRate != 80 || list[0].SendingPausedAt != nil {
		t.Errorf("tenants: %+v", list)
	}
	o := decode[engine.AdminOverview](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: auth}))
	if len(o.DeadLetters) != 0 || o.Tiles.Overall.AcceptedPerMinute <= 0 || o.Tiles.Overall.SentPerMinute <= 0 || o.Tiles.Overall.AcceptToSendP50MS == nil {
		t.Errorf("overview: %+v, want no open dead letter and adm-2's acceptance and send counted", o)
	}
	if _, err := e.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'account locked (131031)'`); err != nil {
		t.Fatal(err)
	}
	paused := decode[struct{ Items []engine.AdminTenant }](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants", header: auth})).Items
	if paused[0].SendingPausedAt == nil || paused[0].SendingPausedReason != "account locked (131031)" {
		t.Errorf("a paused tenant shows as %+v", paused[0])
	}
	// A dependency away shows too (issue 23: "the admin page shows it").
	if _, err := e.Pool.Exec(context.Background(), `INSERT INTO ordo.dependencies (tenant_id, what, down_since, down_reason)
		SELECT id, 'handler', now(), 'connection refused' FROM ordo.tenants
		UNION ALL SELECT id, 'number', now(), '503 (131016)' FROM ordo.tenants`); err != nil {
		t.Fatal(err)
	}
	away := decode[struct{ Items []engine.AdminTenant }](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants", header: auth})).Items
	if away[0].HandlerDownSince == nil || away[0].NumberDownSince == nil {
		t.Errorf("a tenant whose handler and number are away shows as %+v", away[0])
	}
	one := e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants/acme", header: auth})
	mustStatus(t, "tenant", one, http.StatusOK)
	var view struct {
		HandlerDownSince  *time.Time `json:"handler_down_since"`
		HandlerDownReason string     `json:"handler_down_reason"`
		NumberDownSince   *time.Time `json:"number_down_since"`
		NumberDownReason  string     `json:"number_down_reason"`
	}
	if err := json.Unmarshal(one.body, &view); err != nil || view.HandlerDownSince == nil || view.HandlerDownReason != "connection refused" ||
		view.NumberDownSince == nil || view.NumberDownReason != "503 (131016)" {
		t.Errorf("the tenant page's data: %+v (%v); want the handler and the number away, with their reasons", view, err)
	}
	if o.Sandbox || len(o.SandboxSends) != 0 {
		t.Errorf("overview shows the sandbox while it is off")
	}
	for name, s := range map[string]string{
		"access token": jobstest.AccessToken, "app secret": "app-secret-x", "verify token": "verify-x",
		"API key": e.APIKey, "handler secret": e.Secret, "handler URL": "0b9c-secret-path",
	} {
		if strings.Contains(string(a.body), s) {
			t.Errorf("the overview shows the %s", name)
		}
	}
}

// Conversations needing attention: halted first, then by backlog.
func TestAdminAttentionOrder(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}})
	e.WhatsApp.SetResponder(failPrefixed)
	e.deadLetter(t, "halt-1", "halted-conv")
	// Backlogs without workers draining them: stop the runner first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Runner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for conv, n := range map[string]int{"small": 2, "big": 5} {
		for i := range n {
			e.Ingest(conv, conv+"-"+string(rune('a'+i)), "x")
		}
	}
	o := decode[engine.AdminOverview](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: e.login(t, "admin", adminPassword)}))
	var got []string
	for _, c := range o.Attention {
		got = append(got, c.ConversationID)
	}
	if strings.Join(got, ",") != "halted-conv,big,small" || o.Attention[1].Backlog != 5 || o.Attention[0].HaltedAt == nil {
		t.Errorf("attention: %+v, want halted-conv, then big (5), then small (2)", o.Attention)
	}
}

// needChromium skips a browser test when Chromium is missing, except in CI
// (CI=set), where a missing browser is a failure. `make test` installs it
// first on a Debian machine (.ci/deps), so a skip means that could not.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("this test drives a real browser and needs %s: install it with `apt-get update && apt-get install -y chromium` (make test does when it can): %v", chromiumPath, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}
