package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/web"
)

// badCase is one hostile or careless request and the contract's answer.
type badCase struct {
	name        string
	method      string
	path        string
	key         string // "good" for the tenant's API key, else sent as is ("" none)
	header      http.Header
	contentType string
	body        string
	sign        string // sign the body with this app secret (webhooks)
	status      int
	code        string
}

// Every endpoint against bad input: each answer has the status and the
// contract's {"error":{"code","message"}}, and no request stores a row.
func TestBadInputEveryEndpoint(t *testing.T) {
	t.Parallel()
	const limit = 4096
	e := start(t, options{
		web:  web.Config{MaxBodyBytes: limit, AdminPassword: adminPassword, AuthFailureLimit: 1 << 30},
		jobs: jobstest.Options{NoStart: true},
	})
	cases := badCases(limit, e.login(t, "admin", adminPassword))
	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
	t.Logf("%d bad-input cases", len(cases))
	for _, c := range cases {
		before := stored(t, e.Bundle)
		r := request{method: c.method, path: c.path, key: c.key, header: c.header, contentType: c.contentType, body: c.body}
		if c.key == "good" {
			r.key = e.APIKey
		}
		if c.sign != "" {
			r.header = withHeader(r.header, "X-Hub-Signature-256", whatsapp.Sign(c.sign, []byte(c.body)))
		}
		a := e.call(t, r)
		mustError(t, c.name, a, c.status, c.code)
		for _, w := range []string{"Go struct", "json: ", "pgx", "SQLSTATE", "runtime error"} {
			if strings.Contains(string(a.body), w) {
				t.Errorf("%s: answer %s shows %q", c.name, a.body, w)
			}
		}
		if after := stored(t, e.Bundle); after != before {
			t.Errorf("%s: stored rows: %s → %s", c.name, before, after)
		}
	}
}

func badCases(limit int, auth http.Header) []badCase {
	var cs []badCase
	add := func(c badCase) { cs = append(cs, c) }

	// Every API route without a valid key.
	for _, ep := range apiEndpoints {
		for name, key := range map[string]string{
			"no key":                 "",
			"wrong key":              "ordo_AAAAAAAA_" + strings.Repeat("z", 32),
			"garbage key":            "'; DROP TABLE ordo.tenants;--",
			"key of a revoked shape": "ordo_" + strings.Repeat("A", 8) + "_" + strings.Repeat("!", 32),
		} {
			add(badCase{name: ep.method + " " + ep.path + " " + name, method: ep.method, path: ep.path, key: key, body: ep.body, status: 401, code: "unauthorized"})
		}
		add(badCase{name: ep.method + " " + ep.path + " basic scheme", method: ep.method, path: ep.path, header: basic("acme", "x"), body: ep.body, status: 401, code: "unauthorized"})
	}

	// POST /v1/messages bodies.
	msg := func(fields string) string {
		return `{"message_id":"m1","conversation_id":"c1","type":"text","text":{"body":"hi"}` + fields + `}`
	}
	post := func(name, contentType, body string, status int, code string) {
		add(badCase{name: "message " + name, method: http.MethodPost, path: "/v1/messages", key: "good", contentType: contentType, body: body, status: status, code: code})
	}
	inv := func(name, body string) { post(name, "", body, 400, "invalid_request") }
	inv("malformed JSON", `{"message_id": "m1", "conversation_id":`)
	inv("JSON array", `[`+msg("")+`]`)
	inv("JSON null", `null`)
	inv("JSON string", `"m1"`)
	inv("JSON number", `42`)
	inv("trailing garbage", msg("")+`}`)
	inv("two objects", msg("")+msg(""))
	post("empty body", "application/json", ``, 400, "invalid_request")
	inv("whitespace body", "   ")
	post("oversized body", "", msg(`,"pad":"`+strings.Repeat("x", limit)+`"`), 413, "payload_too_large")
	post("text/plain", "text/plain", msg(""), 415, "unsupported_media_type")
	post("form", "application/x-www-form-urlencoded", "message_id=m1&conversation_id=c1", 415, "unsupported_media_type")
	post("no content type", "-", msg(""), 415, "unsupported_media_type")
	post("broken content type", "application/json; charset", msg(""), 415, "unsupported_media_type")
	post("multipart", "multipart/form-data; boundary=x", msg(""), 415, "unsupported_media_type")
	inv("invalid UTF-8 in an id", "{\"message_id\":\"m\xff1\",\"conversation_id\":\"c1\",\"type\":\"text\"}")
	inv("invalid UTF-8 in the text", "{\"message_id\":\"m1\",\"conversation_id\":\"c1\",\"type\":\"text\",\"text\":{\"body\":\"\xc3\x28\"}}")
	inv("overlong UTF-8", "{\"message_id\":\"m\xc0\xafx\",\"conversation_id\":\"c1\",\"type\":\"text\"}")
	inv("UTF-8 encoded surrogate", "{\"message_id\":\"m1\",\"conversation_id\":\"c1\",\"type\":\"text\",\"text\":{\"body\":\"\xed\xa0\x80\"}}")
	inv("lone surrogate in the text", msg(`,"x":"\ud800"`))
	inv("lone low surrogate", msg(`,"x":"\udfff"`))
	inv("reversed pair", msg(`,"x":"\ude00\ud83d"`))
	inv("lone surrogate in message_id", `{"message_id":"\ud800","conversation_id":"c1","type":"text"}`)
	inv("lone surrogate in conversation_id", `{"message_id":"m1","conversation_id":"c\udbff","type":"text"}`)
	inv("lone surrogate in a key", msg(`,"\ud800":1`))
	inv("NUL in the text", msg(`,"x":"a\u0000b"`))
	for _, f := range []string{"message_id", "conversation_id"} {
		set := func(v string) string {
			if f == "message_id" {
				return `{"message_id":` + v + `,"conversation_id":"c1","type":"text"}`
			}
			return `{"message_id":"m1","conversation_id":` + v + `,"type":"text"}`
		}
		for name, v := range map[string]string{
			"missing": "null", "empty": `""`, "a space": `" "`, "leading space": `" x"`, "trailing space": `"x "`,
			"257 chars": `"` + strings.Repeat("x", 257) + `"`, "257 two-byte chars": `"` + strings.Repeat("é", 257) + `"`,
			"newline": `"a\nb"`, "tab": `"a\tb"`, "NUL": `"a\u0000b"`, "DEL": `"a\u007fb"`, "C1 control": `"a\u0085b"`,
			"number": `1`, "object": `{}`, "array": `["x"]`, "boolean": `true`,
		} {
			inv(f+" "+name, set(v))
		}
	}
	inv("array direction", msg(`,"direction":["inbound"]`))
	inv("unknown direction", msg(`,"direction":"sideways"`))
	inv("outbound without type", `{"message_id":"m1","conversation_id":"c1"}`)
	inv("inbound without payload", `{"message_id":"m1","conversation_id":"c1","direction":"inbound"}`)
	inv("inbound with a string payload", `{"message_id":"m1","conversation_id":"c1","direction":"inbound","payload":"hi"}`)
	inv("inbound with an array payload", `{"message_id":"m1","conversation_id":"c1","direction":"inbound","payload":[1]}`)
	inv("inbound with a null payload", `{"message_id":"m1","conversation_id":"c1","direction":"inbound","payload":null}`)

	// Ids in paths.
	for _, p := range []string{"/v1/messages/", "/v1/conversations/"} {
		for name, id := range map[string]string{
			"a space": "%20", "leading space": "%20x", "trailing space": "x%20", "newline": "a%0Ab", "NUL": "a%00b",
			"tab": "%09", "invalid UTF-8": "m%FF", "257 chars": strings.Repeat("x", 257),
		} {
			add(badCase{name: "GET " + p + " " + name, method: http.MethodGet, path: p + id, key: "good", status: 400, code: "invalid_request"})
		}
		add(badCase{name: "GET " + p + " unknown", method: http.MethodGet, path: p + "nope", key: "good", status: 404, code: "not_found"})
		add(badCase{name: "GET " + p + " slash", method: http.MethodGet, path: p + "a%2Fb", key: "good", status: 404, code: "not_found"})
	}

	// Dead letters.
	for _, q := range []string{"limit=many", "limit=501", "limit=-1", "state=bogus", "after=-1", "after=x", "after=99999999999999999999", "conversation_id=%0A", "conversation_id=%20"} {
		add(badCase{name: "dead letters " + q, method: http.MethodGet, path: "/v1/dead-letters?" + q, key: "good", status: 400, code: "invalid_request"})
	}
	for _, p := range []string{"/v1/dead-letters/999999", "/v1/dead-letters/x'1", "/v1/dead-letters/-1", "/v1/dead-letters/%20"} {
		add(badCase{name: "GET " + p, method: http.MethodGet, path: p, key: "good", status: 404, code: "not_found"})
	}
	for _, action := range []string{"replay", "skip"} {
		for _, id := range []string{"999999", "abc", "1e3"} {
			add(badCase{name: action + " " + id, method: http.MethodPost, path: "/v1/dead-letters/" + id + "/" + action, key: "good", status: 404, code: "not_found"})
		}
	}

	// The webhook handshake.
	hs := "/webhooks/whatsapp/acme?"
	for name, q := range map[string]string{
		"no parameters": "", "wrong token": "hub.mode=subscribe&hub.verify_token=nope&hub.challenge=1",
		"wrong mode":                         "hub.mode=unsubscribe&hub.verify_token=verify-x&hub.challenge=1",
		"no challenge":                       "hub.mode=subscribe&hub.verify_token=verify-x",
		"control character in the challenge": "hub.mode=subscribe&hub.verify_token=verify-x&hub.challenge=a%0Ab",
	} {
		add(badCase{name: "handshake " + name, method: http.MethodGet, path: hs + q, status: 403, code: "forbidden"})
	}
	add(badCase{name: "handshake unknown tenant", method: http.MethodGet, path: "/webhooks/whatsapp/nobody?hub.mode=subscribe&hub.verify_token=verify-x&hub.challenge=1", status: 403, code: "forbidden"})

	// Webhook deliveries.
	good := string(oneMessage(jobstest.PhoneNumberID, "16505551234", "wamid.bad"))
	wh := func(name, slug, body, sign string, status int, code string) {
		add(badCase{name: "webhook " + name, method: http.MethodPost, path: "/webhooks/whatsapp/" + slug, body: body, sign: sign, status: status, code: code})
	}
	wh("unsigned", "acme", good, "", 401, "unauthorized")
	wh("signed with another secret", "acme", good, "guess", 401, "unauthorized")
	wh("unknown tenant", "nobody", good, waAppSecret, 401, "unauthorized")
	wh("malformed slug", "Acme_1", good, waAppSecret, 401, "unauthorized")
	wh("over 1 MiB", "acme", `{"pad":"`+strings.Repeat("x", 1<<20)+`"}`, waAppSecret, 413, "payload_too_large")
	wh("signed, not JSON", "acme", "not json", waAppSecret, 400, "invalid_request")
	wh("signed, entry an object", "acme", `{"object":"whatsapp_business_account","entry":{}}`, waAppSecret, 400, "invalid_request")
	wh("signed, wrong object", "acme", `{"object":"page","entry":[]}`, waAppSecret, 400, "invalid_request")
	wh("signed, not UTF-8", "acme", strings.Replace(good, "hello", "\xff\xfe", 1), waAppSecret, 400, "invalid_request")
	wh("signed, another number", "acme", string(oneMessage("9999999", "1", "wamid.bad2")), waAppSecret, 400, "invalid_request")
	wh("signed, message without id", "acme", `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"from":"1"}]}}]}]}`, waAppSecret, 400, "invalid_request")
	wh("signed, id with a newline", "acme", strings.Replace(good, "wamid.bad", `wamid\nbad`, 1), waAppSecret, 400, "invalid_request")
	add(badCase{name: "webhook PUT", method: http.MethodPut, path: "/webhooks/whatsapp/acme", body: good, status: 405, code: "method_not_allowed"})

	// The admin page.
	write := withHeader(auth, "X-Ordo-Admin", "1")
	for name, h := range map[string]http.Header{"no credentials": nil, "wrong password": basic("admin", "wrong"), "bearer key": {"Authorization": {"Bearer ordo_AAAAAAAA_" + strings.Repeat("z", 32)}}} {
		add(badCase{name: "admin overview " + name, method: http.MethodGet, path: "/admin/api/overview", header: h, status: 401, code: "unauthorized"})
	}
	for name, h := range map[string]http.Header{
		"without the header": auth, "from another origin": withHeader(write, "Origin", "https://evil.example"),
		"from a null origin":              withHeader(write, "Origin", "null"),
		"with a spoofed X-Forwarded-Host": withHeader(withHeader(write, "Origin", "https://evil.example"), "X-Forwarded-Host", "evil.example"),
	} {
		add(badCase{name: "admin skip " + name, method: http.MethodPost, path: "/admin/api/dead-letters/1/skip", header: h, status: 403, code: "forbidden"})
	}
	add(badCase{name: "admin GET on a write", method: http.MethodGet, path: "/admin/api/dead-letters/1/replay", header: auth, status: 405, code: "method_not_allowed"})
	add(badCase{name: "admin unknown path", method: http.MethodGet, path: "/admin/nothing", header: auth, status: 404, code: "not_found"})
	add(badCase{name: "admin replay unknown", method: http.MethodPost, path: "/admin/api/dead-letters/999999/replay", header: write, status: 404, code: "not_found"})

	// Routes and methods.
	for _, r := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/v1/messages", 405, "method_not_allowed"},
		{http.MethodDelete, "/v1/messages/m1", 405, "method_not_allowed"},
		{http.MethodPut, "/v1/conversations/c1", 405, "method_not_allowed"},
		{http.MethodGet, "/v1/nothing", 404, "not_found"},
		{http.MethodGet, "/nothing", 404, "not_found"},
		{http.MethodPost, "/healthz", 405, "method_not_allowed"},
		{http.MethodGet, "/sandbox/sends", 404, "not_found"}, // the sandbox is off outside ordo dev
	} {
		add(badCase{name: fmt.Sprintf("%s %s", r.method, r.path), method: r.method, path: r.path, key: "good", status: r.status, code: r.code})
	}
	return cs
}
