package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/web"
)

// Every console endpoint refuses bad input with the contract's error shape,
// in the contract's words, and stores nothing (no tenant, key, credential
// or audit entry) when it does.
func TestAdminConsoleBadInput(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{NoStart: true}})
	auth := e.login(t, "admin", adminPassword)
	write := withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", e.URL)
	stored := func() string {
		return strings.Join([]string{
			queryString(t, e, `SELECT count(*) FROM ordo.tenants`), queryString(t, e, `SELECT count(*) FROM ordo.api_keys WHERE revoked_at IS NULL`),
			queryString(t, e, `SELECT count(*) FROM ordo.credentials`), queryString(t, e, `SELECT count(*) FROM ordo.audit_log`),
			queryString(t, e, `SELECT count(*) FROM ordo.tenants WHERE sending_paused_at IS NOT NULL`),
			queryString(t, e, `SELECT string_agg(concat_ws(',', name, handler_url, on_dead_letter, max_attempts, send_rate, weight, retention), ';') FROM ordo.tenants`),
		}, " ")
	}
	before := stored()
	long := strings.Repeat("x", 70<<10)
	for _, c := range []struct {
		name, path, body, contentType string
		status                        int
		code, message                 string
	}{
		{"create: no slug", "/admin/api/tenants", `{}`, "", 400, "invalid_request", "slug: required"},
		{"create: bad slug", "/admin/api/tenants", `{"slug":"Acme!"}`, "", 400, "invalid_request", "slug: must be"},
		{"create: taken slug", "/admin/api/tenants", `{"slug":"acme"}`, "", 409, "conflict", "already exists"},
		{"create: slug a number", "/admin/api/tenants", `{"slug":7}`, "", 400, "invalid_request", "slug: must be a string"},
		{"create: unknown field", "/admin/api/tenants", `{"slug":"x","api_key":"mine"}`, "", 400, "invalid_request", "api_key: unknown field"},
		{"create: bad handler URL", "/admin/api/tenants", `{"slug":"x","handler_url":"ftp://a"}`, "", 400, "invalid_request", "handler_url: must be an absolute"},
		{"create: metadata handler URL", "/admin/api/tenants", `{"slug":"x","handler_url":"http://169.254.169.254/latest/meta-data/"}`, "", 400, "invalid_request", "handler_url: must not point at 169.254.169.254 (link-local)"},
		{"settings: link-local events URL", "/admin/api/tenants/acme/settings", `{"events_url":"http://[fe80::1]/"}`, "", 400, "invalid_request", "events_url: must not point at fe80::1 (link-local)"},
		{"settings: metadata name", "/admin/api/tenants/acme/settings", `{"handler_url":"http://metadata.google.internal/"}`, "", 400, "invalid_request", "handler_url: must not name a cloud metadata service"},
		{"settings: decimal IPv4", "/admin/api/tenants/acme/settings", `{"handler_url":"http://2130706433/"}`, "", 400, "invalid_request", "handler_url: host \"2130706433\" reads as an IPv4 address"},
		{"create: not JSON", "/admin/api/tenants", `slug=x`, "application/x-www-form-urlencoded", 415, "unsupported_media_type", "Content-Type"},
		{"create: broken JSON", "/admin/api/tenants", `{"slug":`, "", 400, "invalid_request", "body: must be one JSON object"},
		{"create: two objects", "/admin/api/tenants", `{"slug":"x"}{"slug":"y"}`, "", 400, "invalid_request", "body: must be one JSON object"},
		{"create: too large", "/admin/api/tenants", `{"name":"` + long + `"}`, "", 413, "payload_too_large", "body larger"},
		{"settings: unknown tenant", "/admin/api/tenants/nobody/settings", `{"max_attempts":3}`, "", 404, "not_found", "not found"},
		{"settings: max_attempts 0", "/admin/api/tenants/acme/settings", `{"max_attempts":0}`, "", 400, "invalid_request", "max_attempts: must be between 1 and 100"},
		{"settings: max_attempts text", "/admin/api/tenants/acme/settings", `{"max_attempts":"3"}`, "", 400, "invalid_request", "max_attempts: must be a number"},
		{"settings: weight", "/admin/api/tenants/acme/settings", `{"weight":0,"name":"changed"}`, "", 400, "invalid_request", "weight: must be between 1 and 1000"},
		{"settings: policy", "/admin/api/tenants/acme/settings", `{"on_dead_letter":"drop"}`, "", 400, "invalid_request", "on_dead_letter: must be halt or skip"},
		{"settings: retention", "/admin/api/tenants/acme/settings", `{"retention":"soon"}`, "", 400, "invalid_request", "retention: must be"},
		{"settings: handler mode", "/admin/api/tenants/acme/settings", `{"handler_mode":"later"}`, "", 400, "invalid_request", "handler_mode: must be"},
		{"credential: missing field", "/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":"1","access_token":"t","app_secret":"s"}`, "", 400, "invalid_request", "verify_token: required"},
		{"credential: unknown field", "/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":"1","access_token":"t","app_secret":"s","verify_token":"v","x":"y"}`, "", 400, "invalid_request", "x: unknown field"},
		{"credential: number", "/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":1}`, "", 400, "invalid_request", "must be a string"},
		{"credential: phone id", "/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":"+1 555","access_token":"t","app_secret":"s","verify_token":"v"}`, "", 400, "invalid_request", "phone_number_id: must be"},
		{"credential: control char", "/admin/api/tenants/acme/credentials/whatsapp", `{"phone_number_id":"1","access_token":"t\u0007","app_secret":"s","verify_token":"v"}`, "", 400, "invalid_request", "access_token: must be printable"},
		{"credential: unknown tenant", "/admin/api/tenants/nobody/credentials/whatsapp", `{"phone_number_id":"1","access_token":"t","app_secret":"s","verify_token":"v"}`, "", 404, "not_found", "not found"},
		{"key: unknown tenant", "/admin/api/tenants/nobody/api-keys", `{}`, "", 404, "not_found", "not found"},
		{"revoke: unknown prefix", "/admin/api/tenants/acme/api-keys/nope/revoke", `{}`, "", 404, "not_found", "not found"},
		{"pause: unknown tenant", "/admin/api/tenants/nobody/pause", `{}`, "", 404, "not_found", "not found"},
		{"pause: reason too long", "/admin/api/tenants/acme/pause", `{"reason":"` + strings.Repeat("r", 201) + `"}`, "", 400, "invalid_request", "reason: must be"},
		{"resume: unknown tenant", "/admin/api/tenants/nobody/resume", `{}`, "", 404, "not_found", "not found"},
		{"bulk: no action", "/admin/api/dead-letters/bulk", `{}`, "", 400, "invalid_request", "action: must be replay or skip"},
		{"bulk: bad age", "/admin/api/dead-letters/bulk", `{"action":"replay","min_age":"old"}`, "", 400, "invalid_request", "min_age: must be an age"},
	} {
		a := e.call(t, request{method: http.MethodPost, path: c.path, header: write, body: c.body, contentType: c.contentType})
		mustError(t, c.name, a, c.status, c.code)
		if msg := decode[struct{ Error engine.Error }](t, a).Error.Message; !strings.Contains(msg, c.message) || strings.ContainsAny(msg, "*[") || strings.Contains(msg, "Go ") || strings.Contains(msg, "json:") || strings.Contains(msg, "struct") || strings.Contains(msg, "int64") {
			t.Errorf("%s: message %q, want it to say %q in the contract's words", c.name, msg, c.message)
		}
		if now := stored(); now != before {
			t.Fatalf("%s stored something: %s, was %s", c.name, now, before)
		}
	}

	// Reads refuse bad filters the same way.
	for _, c := range []struct{ name, path, message string }{
		{"search: bad status", "/admin/api/messages?status=lost", "status: must be"},
		{"search: bad since", "/admin/api/messages?since=yesterday", "since: must be an RFC 3339 time"},
		{"search: bad cursor", "/admin/api/messages?cursor=%21%21", "cursor: not one this console handed out"},
		{"search: bad direction", "/admin/api/messages?direction=sideways", "direction: must be inbound or outbound"},
		{"message: control character", "/admin/api/tenants/acme/messages/a%07b", "message_id: "},
		{"audit: long actor", "/admin/api/audit?actor=" + strings.Repeat("a", 201), "at most 200 bytes"},
		{"search: control character", "/admin/api/messages?q=a%07b", "q: "},
		{"dead letters: bad state", "/admin/api/dead-letters?state=closed", "state: must be open, resolved or all"},
		{"dead letters: bad age", "/admin/api/dead-letters?min_age=1y", "min_age: must be an age"},
		{"dead letters: bad limit", "/admin/api/dead-letters?limit=900", "limit: must be 1 to 500"},
		{"timeline: no conversation", "/admin/api/timeline?tenant=acme", "conversation_id: required"},
		{"timeline: no tenant", "/admin/api/timeline?conversation_id=c1", "tenant: required"},
		{"audit: bad before", "/admin/api/audit?before=x", "before: must be a non-negative integer"},
	} {
		a := e.call(t, request{method: http.MethodGet, path: c.path, header: auth})
		mustError(t, c.name, a, 400, "invalid_request")
		if msg := decode[struct{ Error engine.Error }](t, a).Error.Message; !strings.Contains(msg, c.message) {
			t.Errorf("%s: message %q, want %q", c.name, msg, c.message)
		}
	}
	mustError(t, "unknown conversation", e.call(t, request{method: http.MethodGet, path: "/admin/api/timeline?tenant=acme&conversation_id=none", header: auth}), 404, "not_found")
	mustError(t, "unknown tenant", e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants/nobody", header: auth}), 404, "not_found")

	// Console writes keep the page's CSRF and Origin checks, and ask for the
	// password before anything else.
	for name, h := range map[string]http.Header{
		"without the header":  auth,
		"from another origin": withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", "https://evil.example"),
	} {
		mustError(t, "create "+name, e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants", header: h, body: `{"slug":"forged"}`}), 403, "forbidden")
	}
	mustError(t, "create without password", e.call(t, request{method: http.MethodPost, path: "/admin/api/tenants", header: withHeader(basic("op", "wrong"), "X-Ordo-Admin", "1"), body: `{"slug":"forged"}`}), 401, "unauthorized")
	if now := stored(); now != before {
		t.Fatalf("a refused write stored something: %s, was %s", now, before)
	}
}

// Onboarding through the console: the key and handler secret are shown in
// the creation's answer only; the credential is write-only; every action is
// audited with who did it and no secret.
func TestAdminConsoleTenantLifecycle(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{NoStart: true}})
	auth := e.operator(t, "alice", engine.RoleAdmin)
	write := withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", e.URL)
	post := func(path, body string, want int) answer {
		t.Helper()
		a := e.call(t, request{method: http.MethodPost, path: path, header: write, body: body})
		mustStatus(t, "POST "+path, a, want)
		return a
	}
	created := decode[struct {
		APIKey        string `json:"api_key"`
		HandlerSecret string `json:"handler_secret"`
	}](t, post("/admin/api/tenants", `{"slug":"beta","name":"Beta","handler_url":"https://n8n.example/webhook/beta-secret-path"}`, 201))
	if !strings.HasPrefix(created.APIKey, "ordo_") || len(created.HandlerSecret) != 64 {
		t.Fatalf("create answered key %q secret %q", created.APIKey, created.HandlerSecret)
	}
	mustStatus(t, "the new key works", e.get(t, created.APIKey, "/v1/dead-letters"), 200)

	const token, appSecret, verify = "EAAG-access-token-123", "app-secret-456", "verify-token-789"
	post("/admin/api/tenants/beta/credentials/whatsapp", `{"phone_number_id":"1055","access_token":"`+token+`","app_secret":"`+appSecret+`","verify_token":"`+verify+`"}`, 200)
	post("/admin/api/tenants/beta/settings", `{"max_attempts":3,"on_dead_letter":"skip","send_rate":0,"weight":4,"retention":"7d","handler_timeout_ms":5000}`, 200)
	key := decode[struct {
		APIKey string `json:"api_key"`
		Prefix string `json:"prefix"`
	}](t, post("/admin/api/tenants/beta/api-keys", `{}`, 201))
	post("/admin/api/tenants/beta/api-keys/"+key.Prefix+"/revoke", `{}`, 200)
	mustError(t, "revoked key", e.get(t, key.APIKey, "/v1/dead-letters"), 401, "unauthorized")
	post("/admin/api/tenants/beta/pause", `{"reason":"customer asked"}`, 200)
	post("/admin/api/tenants/beta/resume", `{}`, 200)

	a := e.call(t, request{method: http.MethodGet, path: "/admin/api/tenants/beta", header: auth})
	mustStatus(t, "tenant", a, 200)
	v := decode[struct {
		MaxAttempts    int                       `json:"max_attempts"`
		OnDeadLetter   string                    `json:"on_dead_letter"`
		Weight         int                       `json:"weight"`
		Retention      string                    `json:"retention"`
		WhatsApp       string                    `json:"whatsapp"`
		VerifyTokenSet bool                      `json:"verify_token_set"`
		WebhookURL     string                    `json:"webhook_url"`
		SendingPaused  bool                      `json:"sending_paused"`
		Keys           []struct{ Prefix string } `json:"api_keys"`
	}](t, a)
	if v.MaxAttempts != 3 || v.OnDeadLetter != "skip" || v.Weight != 4 || v.Retention != "7d" || v.WhatsApp != "set" || !v.VerifyTokenSet ||
		v.WebhookURL != e.URL+"/webhooks/whatsapp/beta" || v.SendingPaused || len(v.Keys) != 2 {
		t.Errorf("tenant view: %+v", v)
	}
	audit := e.call(t, request{method: http.MethodGet, path: "/admin/api/audit?tenant=beta", header: auth})
	var actions []string
	for _, x := range decode[struct{ Items []engine.AuditEntry }](t, audit).Items {
		actions = append(actions, x.Action)
		if x.Actor != "admin:alice" || x.Tenant != "beta" {
			t.Errorf("audit entry %+v: want admin:alice on beta", x)
		}
	}
	if got := strings.Join(actions, ","); got != "tenant.resume,tenant.pause,api_key.revoke,api_key.create,tenant.update,credential.set,tenant.create" {
		t.Errorf("audit: %s", got)
	}
	for name, s := range map[string]string{"access token": token, "app secret": appSecret, "verify token": verify,
		"API key": created.APIKey, "second API key": key.APIKey, "handler secret": created.HandlerSecret, "handler URL": "beta-secret-path"} {
		for what, body := range map[string][]byte{"tenant view": a.body, "audit": audit.body} {
			if strings.Contains(string(body), s) {
				t.Errorf("the %s shows the %s", what, name)
			}
		}
	}
}

// queryString reads one value as text.
func queryString(t *testing.T, e *env, q string) string {
	t.Helper()
	var s *string
	if err := e.Pool.QueryRow(context.Background(), "SELECT ("+q+")::text").Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if s == nil {
		return "NULL"
	}
	return *s
}

// Dead letters by filter: the preview counts what the filter selects (by
// tenant, reason text and age), and Skip all lets each halted conversation
// go on with the messages behind its dead one, in order; one audit entry
// per dead letter and one for the bulk action.
func TestAdminConsoleBulkSkip(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}})
	e.WhatsApp.SetResponder(failPrefixed)
	auth := e.operator(t, "bob", engine.RoleOperator)
	write := withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", e.URL)
	for _, c := range []string{"c1", "c2", "c3"} {
		e.deadLetter(t, "dead-"+c, c)
		for i := range 2 {
			mustStatus(t, "behind", e.post(t, e.APIKey, "/v1/messages", outbound(fmt.Sprintf("behind-%s-%d", c, i), c, "fine")), http.StatusAccepted)
		}
	}
	preview := func(query string) int64 {
		t.Helper()
		a := e.call(t, request{method: http.MethodGet, path: "/admin/api/dead-letters?" + query, header: auth})
		mustStatus(t, "preview "+query, a, 200)
		return decode[engine.AdminDeadLetterPage](t, a).Total
	}
	first := decode[engine.AdminDeadLetterPage](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/dead-letters?tenant=acme", header: auth})).Items[0]
	shouting := url.QueryEscape(strings.ToUpper(first.Reason[len(first.Reason)/2:]))
	for query, want := range map[string]int64{
		"tenant=acme": 3, "tenant=other": 0, "reason=131026": 3, "reason=" + shouting: 3, "reason=no-such-reason": 0,
		"min_age=1h": 0, "min_age=0s": 3, "state=resolved": 0, "state=all&tenant=acme&limit=1": 3,
	} {
		if got := preview(query); got != want {
			t.Errorf("preview %s: %d, want %d", query, got, want)
		}
	}
	mustStatus(t, "nothing older than 1h", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/bulk", header: write,
		body: `{"action":"skip","tenant":"acme","min_age":"1h"}`}), 200)
	a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/bulk", header: write, body: `{"action":"skip","tenant":"acme","reason":"131026"}`})
	mustStatus(t, "skip all", a, 200)
	if r := decode[engine.BulkResult](t, a); r.Selected != 3 || r.Resolved != 3 || r.Conflicts != 0 || r.More {
		t.Errorf("skip all: %+v", r)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		e.waitStatus(t, e.APIKey, "behind-"+c+"-1", "done")
		if m := decode[engine.Message](t, e.get(t, e.APIKey, "/v1/messages/dead-"+c)); m.Status != "skipped" {
			t.Errorf("dead-%s after skip all: %s", c, m.Status)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE actor = 'admin:bob' AND action = 'dead_letter.skip' AND details ->> 'bulk' = 'true'`); n != 3 {
		t.Errorf("%d dead_letter.skip entries, want 3", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE action = 'dead_letters.bulk_skip' AND (details ->> 'resolved')::int IN (0, 3)`); n != 2 {
		t.Errorf("%d dead_letters.bulk_skip entries, want the empty one and the one of 3", n)
	}
	if got := preview("tenant=acme"); got != 0 {
		t.Errorf("%d open dead letters left", got)
	}
}

// The conversation page says when a user waits on a conversation (its
// claims and paced sends go first), and not for a campaign's.
func TestAdminConsoleTimelineShowsAUserWaiting(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{NoStart: true}})
	auth := e.operator(t, "bob", engine.RoleViewer)
	mustStatus(t, "campaign", e.post(t, e.APIKey, "/v1/messages", outbound("camp-1", "c1", "offer")), http.StatusAccepted)
	mustStatus(t, "user", e.post(t, e.APIKey, "/v1/messages", map[string]any{"message_id": "in-1", "conversation_id": "u1", "direction": "inbound", "payload": map[string]string{"text": "hi"}}), http.StatusAccepted)
	for conv, want := range map[string]bool{"c1": false, "u1": true} {
		a := e.call(t, request{method: http.MethodGet, path: "/admin/api/timeline?tenant=acme&conversation_id=" + conv, header: auth})
		mustStatus(t, "timeline "+conv, a, 200)
		tl := decode[engine.Timeline](t, a)
		if tl.Drain == nil || tl.Drain.Urgent != want {
			t.Errorf("%s: drain %+v; want urgent %v", conv, tl.Drain, want)
		}
	}
}
