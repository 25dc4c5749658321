package web_test

// Issue 17: hostile and careless input at ordo's two public doors. Each
// test here failed on main before the web layer was hardened.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// inproc is the handler without a network in between, for requests that
// need a given client address, Host or body reader.
type inproc struct {
	*jobstest.Bundle
	h http.Handler
	t testing.TB
}

func startInproc(t *testing.T, cfg web.Config) *inproc {
	t.Helper()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	return &inproc{Bundle: b, h: web.New(cfg, b.Engine, b.Tenants, b.Vault, nil).Handler(), t: t}
}

// do serves one request from remote (host:port) and returns the answer.
func (e *inproc) do(method, target, remote string, header http.Header, body io.Reader) answer {
	req := httptest.NewRequest(method, target, body)
	if remote != "" {
		req.RemoteAddr = remote
	}
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	checkRecorded(e.t, req, rec)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// stored counts the rows a request could have written.
func stored(t *testing.T, b *jobstest.Bundle) string {
	t.Helper()
	var parts []string
	for _, table := range []string{"ordo.messages", "ordo.conversations", "ordo.steps", "ordo.ready", "ordo.dead_letters", "ordo.sandbox_sends"} {
		parts = append(parts, fmt.Sprintf("%s=%d", table, b.Count(`SELECT count(*) FROM `+table)))
	}
	statuses := b.Count(`SELECT count(*) FROM ordo.steps WHERE provider_status IS NOT NULL`)
	return strings.Join(parts, " ") + fmt.Sprintf(" statuses=%d", statuses)
}

// An unknown tenant, a malformed slug, a tenant without a WhatsApp
// credential and a bad signature answer byte for byte alike: the webhook
// does not tell an attacker which slugs exist. (main: 404 for the unknown
// tenant, 401 for the bad signature.)
func TestWebhookUnknownTenantLooksLikeBadSignature(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{})
	if _, err := e.Tenants.Create(context.Background(), tenants.CreateParams{Slug: "bare"}); err != nil {
		t.Fatal(err)
	}
	body := oneMessage(jobstest.PhoneNumberID, "1", "wamid.X")
	sig := http.Header{"X-Hub-Signature-256": {whatsapp.Sign("guess", body)}}
	want := e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", sig, bytes.NewReader(body))
	mustError(t, "bad signature", want, 401, "unauthorized")
	for _, slug := range []string{"nobody", "bare", "No-Such_Slug", strings.Repeat("a", 64), "%00"} {
		got := e.do(http.MethodPost, "/webhooks/whatsapp/"+slug, "", sig, bytes.NewReader(body))
		if got.status != want.status || !bytes.Equal(got.body, want.body) {
			t.Errorf("slug %q: %s; want exactly %s", slug, got, want)
		}
	}
	// The handshake likewise: 403 whatever the reason.
	q := "?hub.mode=subscribe&hub.verify_token=verify-x&hub.challenge=42"
	wrong := e.do(http.MethodGet, "/webhooks/whatsapp/acme?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=42", "", nil, nil)
	for _, slug := range []string{"nobody", "bare"} {
		got := e.do(http.MethodGet, "/webhooks/whatsapp/"+slug+q, "", nil, nil)
		if got.status != 403 || !bytes.Equal(got.body, wrong.body) {
			t.Errorf("handshake of %q: %s; want exactly %s", slug, got, wrong)
		}
	}
}

// A webhook body over 1 MiB is refused: unread when its length is declared,
// after at most 1 MiB + 1 bytes when it is chunked; and an unknown
// tenant's body is never read at all. (main: up to 8 MiB read first.)
func TestWebhookReadsAtMostOneMiB(t *testing.T) {
	t.Parallel()
	if web.MaxWebhookBytesDefault != 1<<20 {
		t.Fatalf("MaxWebhookBytesDefault = %d, want 1 MiB", web.MaxWebhookBytesDefault)
	}
	e := startInproc(t, web.Config{})
	const eight = 8 << 20
	cases := []struct {
		name, slug string
		declared   bool
		maxRead    int
	}{
		{"declared 8 MB", "acme", true, 0},
		{"chunked 8 MB", "acme", false, 1<<20 + 1},
		{"declared 8 MB, unknown tenant", "nobody", true, 0},
		{"chunked 8 MB, unknown tenant", "nobody", false, 0},
	}
	for _, c := range cases {
		src := &countReader{left: eight}
		req := httptest.NewRequest(http.MethodPost, "/webhooks/whatsapp/"+c.slug, src)
		req.ContentLength = -1
		if c.declared {
			req.ContentLength = eight
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		wantStatus := 413
		if c.slug == "nobody" && !c.declared {
			wantStatus = 401
		}
		if rec.Code != wantStatus || src.read > c.maxRead {
			t.Errorf("%s: %d after reading %d bytes; want %d after at most %d", c.name, rec.Code, src.read, wantStatus, c.maxRead)
		}
	}
	// Exactly 1 MiB, signed, is read and judged on its content.
	msg := oneMessage(jobstest.PhoneNumberID, "1", "wamid.big")
	pad := 1<<20 - len(msg) - len(`"pad":"",`)
	body := append([]byte(`{"pad":"`+strings.Repeat("x", pad)+`",`), msg[1:]...)
	if len(body) != 1<<20 {
		t.Fatalf("test body is %d bytes", len(body))
	}
	a := e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", http.Header{"X-Hub-Signature-256": {whatsapp.Sign(waAppSecret, body)}}, bytes.NewReader(body))
	mustStatus(t, "1 MiB signed", a, 200)
}

// xs is what countReader reads from.
var xs = bytes.Repeat([]byte("x"), 64<<10)

// countReader yields left bytes of 'x', counting what was read.
type countReader struct {
	mu         sync.Mutex
	left, read int
}

func (r *countReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.left)], xs)
	r.left -= n
	r.read += n
	return n, nil
}

// At most MaxUnauthenticatedBodies webhook bodies are read at once; the
// next waits UnauthenticatedBodyWait, then gets 503 with Retry-After. Once
// a slot frees, a signed delivery goes in. (main: no cap.)
func TestWebhookUnauthenticatedBodiesCapped(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{MaxUnauthenticatedBodies: 2, UnauthenticatedBodyWait: 50 * time.Millisecond})
	type slow struct {
		w    *io.PipeWriter
		done chan answer
	}
	var held []slow
	for range 2 {
		pr, pw := io.Pipe()
		s := slow{w: pw, done: make(chan answer, 1)}
		go func() { s.done <- e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", nil, pr) }()
		_, _ = pw.Write([]byte(`{"object":`)) // returns once the handler reads: the slot is taken
		held = append(held, s)
	}
	body := oneMessage(jobstest.PhoneNumberID, "1", "wamid.cap")
	signed := http.Header{"X-Hub-Signature-256": {whatsapp.Sign(waAppSecret, body)}}
	a := e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", signed, bytes.NewReader(body))
	mustError(t, "third body while two are read", a, 503, "unavailable")
	if a.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	for _, s := range held {
		_ = s.w.Close()
		mustError(t, "slow unsigned body", <-s.done, 401, "unauthorized")
	}
	mustStatus(t, "signed delivery once a slot is free", e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", signed, bytes.NewReader(body)), 200)
}

// A signed but malformed webhook is answered with the JSON path at fault,
// in the contract's words. (main: "Go struct field webhookEnvelope.entry of
// type []struct…".)
func TestWebhookMalformedAnswersWithoutGoTypes(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{})
	for _, body := range []string{
		`{"object":"whatsapp_business_account","entry":{}}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":"x"}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":{"id":1}}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"statuses":[1]}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"metadata":"x"}}]}]}`,
		`{"object":["whatsapp_business_account"]}`,
	} {
		a := e.do(http.MethodPost, "/webhooks/whatsapp/acme", "", http.Header{"X-Hub-Signature-256": {whatsapp.Sign(waAppSecret, []byte(body))}}, strings.NewReader(body))
		mustError(t, body, a, 400, "invalid_request")
		for _, w := range []string{"Go ", "struct", "webhook", "json:", "[]", "RawMessage"} {
			if strings.Contains(string(a.body), w) {
				t.Errorf("%s answered %s: shows %q", body, a.body, w)
			}
		}
	}
}

// Every timeout of the HTTP server is set, to the named defaults unless
// configured. (main: no WriteTimeout; the timeouts were literals in cmd.)
func TestServerTimeoutsAllSet(t *testing.T) {
	t.Parallel()
	srv := web.New(web.Config{}, nil, nil, nil, nil).HTTPServer(":0")
	if srv.ReadHeaderTimeout != web.ReadHeaderTimeoutDefault || srv.ReadTimeout != web.ReadTimeoutDefault ||
		srv.WriteTimeout != web.WriteTimeoutDefault || srv.IdleTimeout != web.IdleTimeoutDefault {
		t.Fatalf("timeouts %s %s %s %s; want the defaults", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout, "WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s is unset", name)
		}
	}
	srv = web.New(web.Config{WriteTimeout: 3 * time.Second}, nil, nil, nil, nil).HTTPServer(":0")
	if srv.WriteTimeout != 3*time.Second {
		t.Errorf("configured WriteTimeout became %s", srv.WriteTimeout)
	}
}

// A REST body is read only after the API key is known, and a declared
// length over the limit is refused unread. (main: the 413 came after
// reading up to the limit.)
func TestRESTBodyReadOnlyAfterAuthAndWithinLimit(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{MaxBodyBytes: 4096})
	for _, c := range []struct {
		name, key string
		declared  bool
		status    int
		maxRead   int
	}{
		{"no key", "", true, 401, 0},
		{"wrong key", "ordo_AAAAAAAA_" + strings.Repeat("b", 32), false, 401, 0},
		{"good key, declared 8 MB", e.APIKey, true, 413, 0},
		{"good key, chunked 8 MB", e.APIKey, false, 413, 4097},
	} {
		src := &countReader{left: 8 << 20}
		req := httptest.NewRequest(http.MethodPost, "/v1/messages", src)
		req.Header.Set("Content-Type", "application/json")
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		req.ContentLength = -1
		if c.declared {
			req.ContentLength = 8 << 20
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		checkRecorded(t, req, rec)
		if rec.Code != c.status || src.read > c.maxRead {
			t.Errorf("%s: %d after reading %d bytes; want %d after at most %d", c.name, rec.Code, src.read, c.status, c.maxRead)
		}
	}
}

// Invalid UTF-8 or a lone surrogate escape anywhere in a REST body is a 400
// with nothing stored; a valid pair and an escaped backslash are text.
// (main: a lone surrogate in a text was a 500, in an id it became U+FFFD so
// "m\ud800" and "m\udbff" were one message; " " was a valid message_id.)
func TestRESTTextAndIDs(t *testing.T) {
	t.Parallel()
	e := start(t, options{jobs: jobstest.Options{NoStart: true}})
	before := stored(t, e.Bundle)
	bad := map[string]string{
		"lone surrogate in the text":        `{"message_id":"m1","conversation_id":"c1","type":"text","text":{"body":"\ud800"}}`,
		"second half alone in the text":     `{"message_id":"m1","conversation_id":"c1","type":"text","text":{"body":"a\udfffb"}}`,
		"half a pair, then text":            `{"message_id":"m1","conversation_id":"c1","type":"text","text":{"body":"\ud83dx"}}`,
		"lone surrogate in message_id":      `{"message_id":"m\ud800","conversation_id":"c1","type":"text"}`,
		"another lone one in message_id":    `{"message_id":"m\udbff","conversation_id":"c1","type":"text"}`,
		"lone surrogate in conversation_id": `{"message_id":"m1","conversation_id":"\udc00","type":"text"}`,
		"lone surrogate in a key":           `{"message_id":"m1","conversation_id":"c1","type":"text","\ud800":1}`,
		"lone surrogate in inbound payload": `{"message_id":"m1","conversation_id":"c1","direction":"inbound","payload":{"t":"\ud800"}}`,
		"invalid UTF-8 in the payload":      "{\"message_id\":\"m1\",\"conversation_id\":\"c1\",\"direction\":\"inbound\",\"payload\":{\"t\":\"\xed\xa0\x80\"}}",
		"message_id a space":                `{"message_id":" ","conversation_id":"c1","type":"text"}`,
		"message_id leading space":          `{"message_id":" m1","conversation_id":"c1","type":"text"}`,
		"message_id trailing space":         `{"message_id":"m1 ","conversation_id":"c1","type":"text"}`,
		"conversation_id trailing tab":      `{"message_id":"m1","conversation_id":"c1\t","type":"text"}`,
		"message_id leading no-break space": `{"message_id":"\u00a0m1","conversation_id":"c1","type":"text"}`,
		"message_id line separator":         `{"message_id":"m\u20281","conversation_id":"c1","type":"text"}`,
		"conversation_id ideographic space": `{"message_id":"m1","conversation_id":"\u3000","type":"text"}`,
	}
	for name, body := range bad {
		a := e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: body})
		mustError(t, name, a, 400, "invalid_request")
	}
	if after := stored(t, e.Bundle); after != before {
		t.Fatalf("bad text stored rows: %s → %s", before, after)
	}
	for name, c := range map[string]struct{ body, id string }{
		"a surrogate pair":  {`{"message_id":"m\ud83d\ude00","conversation_id":"c1","type":"text","text":{"body":"hi"}}`, "m😀"},
		"escaped backslash": {`{"message_id":"m\\ud800","conversation_id":"c1","type":"text","text":{"body":"hi"}}`, `m\ud800`},
		"inner space":       {`{"message_id":"m 1","conversation_id":"c1","type":"text","text":{"body":"hi"}}`, "m 1"},
		"a real U+FFFD":     {`{"message_id":"m\ufffd","conversation_id":"c1","type":"text","text":{"body":"hi"}}`, "m\uFFFD"},
	} {
		a := e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: c.body})
		mustStatus(t, name, a, 202)
		if got := decode[engine.Accepted](t, a); got.MessageID != c.id {
			t.Errorf("%s: accepted as %q, want %q", name, got.MessageID, c.id)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 4 {
		t.Fatalf("%d messages, want the 4 distinct ids", n)
	}
}

// Failed authentication is throttled per client address, on the API and
// the admin page: past the limit, 429 with
// Retry-After and no lookup, even for the right key from that address.
// Another address is not affected; X-Forwarded-For counts only from a
// trusted proxy. (main: 5,000 wrong keys, 5,000 lookups, no 429.)
func TestFailedAuthThrottled(t *testing.T) {
	t.Parallel()
	const limit = 5
	e := startInproc(t, web.Config{AuthFailureLimit: limit, AdminPassword: adminPassword,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	wrongKey := func(prefix string, i int) http.Header {
		return http.Header{"Authorization": {fmt.Sprintf("Bearer ordo_%s_%032d", prefix, i)}}
	}
	good := http.Header{"Authorization": {"Bearer " + e.APIKey}}
	get := func(remote string, h http.Header) answer {
		return e.do(http.MethodGet, "/v1/conversations/c1", remote, h, nil)
	}

	// Per address.
	for i := range limit {
		a := get("192.0.2.1:1000", wrongKey(fmt.Sprintf("AAAA%04d", i), i))
		mustError(t, "wrong key", a, 401, "unauthorized")
		if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer")
		}
	}
	a := get("192.0.2.1:1001", wrongKey("BBBBBBBB", 99))
	mustError(t, "wrong key past the limit", a, 429, "rate_limited")
	if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 with Retry-After %q", ra)
	}
	mustError(t, "right key from the blocked address", get("192.0.2.1:1002", good), 429, "rate_limited")
	mustStatus(t, "right key from another address", get("192.0.2.2:1000", good), 404) // no such conversation: authenticated
	// A key that authenticated recently passes the block: one tenant's broken
	// key behind a shared address (an n8n for many tenants) locks nobody else out.
	mustStatus(t, "recently good key from the blocked address", get("192.0.2.1:1004", good), 404)
	// A spoofed X-Forwarded-For from an untrusted peer changes nothing.
	mustError(t, "spoofed X-Forwarded-For", get("192.0.2.1:1003", withHeader(wrongKey("EEEEEEEE", 1), "X-Forwarded-For", "198.51.100.7")), 429, "rate_limited")
	// Through a trusted proxy, clients count apart.
	for i := range limit {
		get("10.0.0.1:1000", withHeader(wrongKey(fmt.Sprintf("CCCC%04d", i), i), "X-Forwarded-For", "198.51.100.1"))
	}
	mustError(t, "client behind the proxy past the limit", get("10.0.0.1:1000", withHeader(wrongKey("FFFFFFFF", 1), "X-Forwarded-For", "198.51.100.1")), 429, "rate_limited")
	mustStatus(t, "another client behind the same proxy", get("10.0.0.1:1000", withHeader(good, "X-Forwarded-For", "198.51.100.2")), 404)

	// Never per key prefix: guesses on one prefix from many addresses
	// block none of them.
	for i := range 2 * limit {
		mustError(t, "guess on one prefix", get(fmt.Sprintf("203.0.113.%d:1000", i+1), wrongKey("DDDDDDDD", i)), 401, "unauthorized")
	}

	// The admin page's basic auth.
	for range limit {
		mustError(t, "wrong admin password", e.do(http.MethodGet, "/admin/api/overview", "192.0.2.50:1", basic("", "wrong"), nil), 401, "unauthorized")
	}
	a = e.do(http.MethodGet, "/admin/api/overview", "192.0.2.50:1", basic("", adminPassword), nil)
	mustError(t, "admin past the limit", a, 429, "rate_limited")
	if a.header.Get("Retry-After") == "" {
		t.Errorf("admin 429 without Retry-After")
	}
	mustStatus(t, "admin from another address", e.do(http.MethodGet, "/admin/api/overview", "192.0.2.51:1", basic("", adminPassword), nil), 200)
}

// A key's public prefix never locks out its right secret (issue 24: 30
// wrong secrets on a key's prefix, then the real key 429 on 30 of 30 for a
// minute). 40 wrong secrets on the real key's prefix from one address: the
// guesser's address is blocked; the real key from another address gets 200,
// 10 of 10. From the guesser's own address the real key waits out the
// window unless it authenticated recently (then it passes, as any recently
// good key does): telling a new key apart would need the very lookup the
// block saves.
func TestKeyPrefixGuessesDoNotLockOutKey(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{})
	prefix := strings.Split(e.APIKey, "_")[1]
	list := func(remote, key string) answer {
		return e.do(http.MethodGet, "/v1/dead-letters", remote, http.Header{"Authorization": {"Bearer " + key}}, nil)
	}
	const guesser = "198.51.100.66:4000"
	blocked := 0
	for i := range 40 {
		a := list(guesser, fmt.Sprintf("ordo_%s_%032d", prefix, i))
		switch {
		case a.status == 429:
			blocked++
		case a.status != 401:
			t.Fatalf("guess %d: %s, want 401 or 429", i, a)
		}
	}
	if want := 40 - web.AuthFailureLimitDefault; blocked != want {
		t.Errorf("%d of 40 guesses answered 429, want the %d past the address's limit", blocked, want)
	}
	mustError(t, "the real key, not seen yet, from the guesser's address", list(guesser, e.APIKey), 429, "rate_limited")
	ok := 0
	for range 10 {
		if a := list("203.0.113.10:5000", e.APIKey); a.status == 200 {
			ok++
		} else {
			t.Logf("real key from another address: %s", a)
		}
	}
	if ok != 10 {
		t.Fatalf("real key from another address: %d of 10 answered 200, want 10", ok)
	}
	mustStatus(t, "the real key, now recently good, from the guesser's address", list(guesser, e.APIKey), 200)
	mustError(t, "another guess from the guesser's address", list(guesser, fmt.Sprintf("ordo_%s_%032d", prefix, 99)), 429, "rate_limited")
}

// Every 401 of the API names the Bearer scheme. (main: none did.)
func TestEvery401HasWWWAuthenticateBearer(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AuthFailureLimit: 1000}, jobs: jobstest.Options{NoStart: true}})
	for _, ep := range apiEndpoints {
		for name, key := range map[string]string{"no key": "", "wrong key": "ordo_AAAAAAAA_" + strings.Repeat("c", 32), "garbage": "x"} {
			a := e.call(t, request{method: ep.method, path: ep.path, key: key, body: ep.body})
			mustError(t, ep.method+" "+ep.path+" "+name, a, 401, "unauthorized")
			if got := a.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("%s %s %s: WWW-Authenticate %q, want Bearer", ep.method, ep.path, name, got)
			}
		}
	}
}

// apiEndpoints are every route of the REST API.
var apiEndpoints = []struct{ method, path, body string }{
	{http.MethodPost, "/v1/messages", `{"message_id":"m1","conversation_id":"c1","type":"text"}`},
	{http.MethodGet, "/v1/messages/m1", ""},
	{http.MethodGet, "/v1/conversations/c1", ""},
	{http.MethodGet, "/v1/dead-letters", ""},
	{http.MethodGet, "/v1/dead-letters/1", ""},
	{http.MethodPost, "/v1/dead-letters/1/replay", ""},
	{http.MethodPost, "/v1/dead-letters/1/skip", ""},
}

// The admin password has a minimum length, checked where ordo starts.
// (main: any password.)
func TestAdminPasswordMinimum(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{"": true, "short": false, "elevenchars": false, "twelve chars": true, "ééééééééééé": false, adminPassword: true} {
		if err := web.CheckAdminPassword(p); (err == nil) != ok {
			t.Errorf("CheckAdminPassword(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

// The admin Origin check believes X-Forwarded-Host only from a configured
// proxy. (main: from anyone.)
func TestAdminForwardedHostOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{AdminPassword: adminPassword, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	h := withHeader(withHeader(withHeader(basic("", adminPassword), "X-Ordo-Admin", "1"), "Origin", "https://evil.example"), "X-Forwarded-Host", "evil.example")
	a := e.do(http.MethodPost, "/admin/api/dead-letters/424242/skip", "192.0.2.9:1", h, nil)
	mustError(t, "forwarded host from a stranger", a, 403, "forbidden")
	a = e.do(http.MethodPost, "/admin/api/dead-letters/424242/skip", "10.0.0.1:1", h, nil)
	mustError(t, "forwarded host from the proxy", a, 404, "not_found") // past the check: no such dead letter
}

// The sandbox answers only loopback Hosts, so a DNS-rebinding page cannot
// read every tenant's sends. (main: any Host.)
func TestSandboxLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	e := startInproc(t, web.Config{Sandbox: true})
	send := `{"messaging_product":"whatsapp","to":"1","type":"text","text":{"body":"hi"}}`
	for host, want := range map[string]int{
		"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "localhost": 200, "127.0.0.1": 200,
		"evil.example": 403, "evil.example:8080": 403, "127.0.0.1.nip.io:8080": 403, "192.168.1.10:8080": 403,
	} {
		req := httptest.NewRequest(http.MethodGet, "/sandbox/sends", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("GET /sandbox/sends with Host %s: %d, want %d", host, rec.Code, want)
		}
		req = httptest.NewRequest(http.MethodPost, "/sandbox/v23.0/1000001/messages", strings.NewReader(send))
		req.Host = host
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Content-Type", "application/json")
		rec = httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("POST a send with Host %s: %d, want %d", host, rec.Code, want)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.sandbox_sends`); n != 5 {
		t.Fatalf("%d sandbox sends stored, want the 5 from loopback hosts", n)
	}
}
