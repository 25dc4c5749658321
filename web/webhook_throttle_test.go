package web_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/web"
)

// A flood of unsigned webhook posts from one address: past
// web.WebhookFailureLimitDefault posts without a valid signature (missing,
// wrong, an unknown tenant's, a body too large to check) in a window, the
// address gets 429 with Retry-After before a byte of its body is read and
// without waiting for a slot, even while every slot is held, until the
// window ends. An address that sent a valid signature recently is never
// throttled this way (Meta; a proxy every delivery comes through), nor is
// any other address; X-Forwarded-For counts only from a trusted proxy.
// (main: every chunked post to a real tenant read and hashed up to 1 MiB in
// one of the 32 slots, Meta's deliveries waiting behind them for 503s.)
func TestWebhookThrottlesUnsignedPerAddress(t *testing.T) {
	t.Parallel()
	const wait = 5 * time.Second
	// The window is longer than the default's 10 s, which a loaded machine
	// can spend on this test alone; the limit is the default.
	const window = 5 * time.Minute
	e := startInproc(t, web.Config{MaxUnauthenticatedBodies: 1, UnauthenticatedBodyWait: wait, WebhookFailureWindow: window,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	const (
		limit    = web.WebhookFailureLimitDefault
		attacker = "198.51.100.7"
		meta     = "203.0.113.5"
		proxy    = "10.0.0.1:1000"
	)
	post := func(remote, slug string, h http.Header, body io.Reader, declared int64) answer {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/whatsapp/"+slug, body)
		req.RemoteAddr = remote
		req.ContentLength = declared
		for k, v := range h {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	}
	delivered := 0
	deliver := func(remote string, h http.Header) answer {
		body := oneMessage(jobstest.PhoneNumberID, "16505551234", fmt.Sprintf("wamid.throttle-%d", delivered))
		delivered++
		h = withHeader(h, "X-Hub-Signature-256", whatsapp.Sign(waAppSecret, body))
		return post(remote, "acme", h, bytes.NewReader(body), int64(len(body)))
	}
	unsigned := func(i int, remote string, h http.Header) answer {
		small := oneMessage(jobstest.PhoneNumberID, "1", "wamid.forged")
		switch i % 4 {
		case 0: // no signature
			return post(remote, "acme", h, bytes.NewReader(small), int64(len(small)))
		case 1: // a guessed one
			return post(remote, "acme", withHeader(h, "X-Hub-Signature-256", whatsapp.Sign("guess", small)), bytes.NewReader(small), int64(len(small)))
		case 2: // a tenant nobody has
			return post(remote, "nobody", withHeader(h, "X-Hub-Signature-256", whatsapp.Sign("guess", small)), bytes.NewReader(small), int64(len(small)))
		}
		return post(remote, "acme", h, &countReader{left: 2 << 20}, -1) // chunked, too large
	}

	mustStatus(t, "Meta's delivery before the flood", deliver(meta+":443", nil), 200)
	for i := range limit {
		if a := unsigned(i, attacker+":4000", nil); a.status != 401 && a.status != 413 {
			t.Fatalf("unsigned post %d within the limit: %s, want 401 or 413", i, a)
		}
	}

	// Every slot held, by a body from elsewhere that is slow to come.
	pr, pw := io.Pipe()
	holder := make(chan answer, 1)
	go func() { holder <- post("192.0.2.9:1", "acme", nil, pr, -1) }()
	if _, err := pw.Write([]byte("{")); err != nil { // returns once the handler reads it
		t.Fatal(err)
	}

	// Past the limit: 429 at once, nothing read, no slot waited for.
	for _, declared := range []int64{-1, 8 << 20} {
		src := &countReader{left: 8 << 20}
		began := time.Now()
		a := post(attacker+":4001", "acme", nil, src, declared)
		took := time.Since(began)
		mustError(t, fmt.Sprintf("unsigned post past the limit (declared length %d)", declared), a, 429, "rate_limited")
		if ra, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || ra < 1 || ra > int(window/time.Second) {
			t.Errorf("429 with Retry-After %q, want 1..%d seconds", a.header.Get("Retry-After"), int(window/time.Second))
		}
		if a.header.Get("Connection") != "close" {
			t.Errorf("429 without Connection: close (the server would drain the body)")
		}
		if src.read != 0 || took >= wait {
			t.Errorf("429 after reading %d bytes and %s; want none read, without waiting for a slot", src.read, took.Round(time.Millisecond))
		}
	}
	// The address has not signed recently: even a valid signature is not
	// read to find out, and any tenant's URL is refused alike.
	mustError(t, "signed post from the blocked address", deliver(attacker+":4002", nil), 429, "rate_limited")
	mustError(t, "unknown tenant from the blocked address", unsigned(2, attacker+":4003", nil), 429, "rate_limited")
	// A spoofed X-Forwarded-For from an untrusted peer changes nothing.
	mustError(t, "spoofed X-Forwarded-For", unsigned(0, attacker+":4004", http.Header{"X-Forwarded-For": {meta}}), 429, "rate_limited")

	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	mustError(t, "the slow unsigned body", <-holder, 401, "unauthorized")

	// Meta's address, or a proxy in front of everyone, signed recently: a
	// stranger's bad posts from it are refused one by one, never by a
	// block, and Meta's deliveries go on.
	for i := range 2 * limit {
		if a := unsigned(i, meta+":443", nil); a.status != 401 && a.status != 413 {
			t.Fatalf("unsigned post %d from the address that signed recently: %s, want 401 or 413", i, a)
		}
	}
	mustStatus(t, "Meta's delivery after a flood from its address", deliver(meta+":443", nil), 200)
	mustStatus(t, "a fresh address", unsigned(0, "192.0.2.77:1", nil), 401)

	// Behind a trusted proxy, X-Forwarded-For is the address.
	xff := func(client string) http.Header { return http.Header{"X-Forwarded-For": {client}} }
	mustError(t, "the attacker behind the proxy", unsigned(0, proxy, xff(attacker)), 429, "rate_limited")
	mustStatus(t, "Meta behind the proxy", deliver(proxy, xff(meta)), 200)
	for i := range limit {
		unsigned(i, proxy, xff("198.51.100.8"))
	}
	mustError(t, "another client behind the proxy past the limit", unsigned(0, proxy, xff("198.51.100.8")), 429, "rate_limited")
	mustStatus(t, "a third client behind the proxy", unsigned(0, proxy, xff("198.51.100.9")), 401)

	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != delivered-1 { // the blocked address's was not stored
		t.Fatalf("%d messages stored, want Meta's %d", n, delivered-1)
	}
}

// The window ends: a throttled address is heard again, and its failures
// count afresh.
func TestWebhookThrottleWindowEnds(t *testing.T) {
	t.Parallel()
	const window = 300 * time.Millisecond
	e := startInproc(t, web.Config{WebhookFailureLimit: 2, WebhookFailureWindow: window})
	unsignedPost := func() answer {
		return e.do(http.MethodPost, "/webhooks/whatsapp/acme", "198.51.100.7:1", nil, bytes.NewReader([]byte(`{}`)))
	}
	for range 2 {
		mustError(t, "unsigned within the limit", unsignedPost(), 401, "unauthorized")
	}
	mustError(t, "unsigned past the limit", unsignedPost(), 429, "rate_limited")
	time.Sleep(window)
	mustError(t, "unsigned after the window", unsignedPost(), 401, "unauthorized")
}

// The verify handshake is throttled per client address like unsigned
// posts: past WebhookFailureLimit failed handshakes (a wrong verify_token,
// an unknown tenant) the address gets 429 with Retry-After, even with the
// right token, so a verify token cannot be guessed at speed; another
// address is not affected. (main: no limit.)
func TestWebhookHandshakeThrottled(t *testing.T) {
	t.Parallel()
	const limit = 3
	e := startInproc(t, web.Config{WebhookFailureLimit: limit, WebhookFailureWindow: 5 * time.Minute})
	handshake := func(remote, slug, token string) answer {
		return e.do(http.MethodGet, "/webhooks/whatsapp/"+slug+"?hub.mode=subscribe&hub.challenge=4711&hub.verify_token="+token, remote, nil, nil)
	}
	for i := range limit {
		slug := []string{"acme", "nobody"}[i%2]
		mustError(t, "wrong handshake", handshake("198.51.100.7:1", slug, fmt.Sprintf("guess-%d", i)), 403, "forbidden")
	}
	a := handshake("198.51.100.7:2", "acme", waVerifyToken)
	mustError(t, "right token from the guessing address", a, 429, "rate_limited")
	if a.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	a = handshake("203.0.113.5:1", "acme", waVerifyToken)
	if a.status != 200 || string(a.body) != "4711" {
		t.Fatalf("Meta's handshake from another address: %s, want 200 with the challenge", a)
	}
}
