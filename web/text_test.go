package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// A lone surrogate escape is found wherever it is, and nothing else is
// mistaken for one.
func TestLoneSurrogate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		json string
		lone bool
	}{
		{`{"a":"\ud800"}`, true},
		{`{"a":"\uDBFF"}`, true},
		{`{"a":"\udc00"}`, true},       // second half alone
		{`{"a":"\ud800\u0041"}`, true}, // first half, then not a second half
		{`{"a":"\ud800\ud800\udc00"}`, true},
		{`{"a":"x\ud800"}`, true},
		{`{"\ud800":"key"}`, true},
		{`{"a":"\udc00\ud800"}`, true},    // halves in the wrong order
		{`{"a":"\ud83d\ude00"}`, false},   // 😀 as a pair
		{`{"a":"\\ud800"}`, false},        // an escaped backslash, then text
		{`{"a":"\\\ud83d\ude00"}`, false}, // escaped backslash, then a pair
		{`{"a":"\\\ud800"}`, true},        // escaped backslash, then a lone one
		{`{"a":"\u0041\u00e9\uFFFD"}`, false},
		{`{"a":"plain"}`, false},
		{`{"a":"\ud800`, true}, // truncated JSON still reports it
		{`{"a":"\u12"}`, false},
		{`\`, false},
	}
	for _, c := range cases {
		if got := checkText([]byte(c.json)) != nil; got != c.lone {
			t.Errorf("checkText(%s) refused = %v, want %v", c.json, got, c.lone)
		}
	}
}

// Ids are taken as they are or refused: never trimmed, never repaired.
func TestCheckID(t *testing.T) {
	t.Parallel()
	ok := []string{"m1", "wamid.HBgL-1", strings.Repeat("é", 256), "a b", "a/b?c=d#e f%20", "😀", "\uFFFD"}
	bad := []string{"", " ", "  ", " m1", "m1 ", "\tm1", "m1\n", "m\x001", "m\x7f", "m\u0085", "\u00a0m", "m\u2028", "m\u3000",
		strings.Repeat("x", 257), "m\xff"}
	for _, id := range ok {
		if err := checkID("message_id", id); err != nil {
			t.Errorf("checkID(%q): %v", id, err)
		}
	}
	for _, id := range bad {
		err := checkID("message_id", id)
		if err == nil || !strings.HasPrefix(err.(interface{ Error() string }).Error(), "invalid_request: message_id: ") {
			t.Errorf("checkID(%q) = %v, want an invalid_request naming message_id", id, err)
		}
	}
}

// The failed-auth tracker forgets the least recently failed first and so
// never holds more than its bound, however many addresses fail.
func TestAuthThrottleBounded(t *testing.T) {
	t.Parallel()
	th := newAuthThrottle(3, time.Minute, 100)
	now := time.Unix(1_700_000_000, 0)
	th.now = func() time.Time { return now }
	for i := range 3 {
		th.fail("addr:attacker")
		if i < 2 && th.blocked("addr:attacker") != 0 {
			t.Fatalf("blocked after %d failures", i+1)
		}
	}
	if d := th.blocked("addr:attacker"); d != time.Minute {
		t.Fatalf("blocked for %s after 3 failures, want the window", d)
	}
	for i := range 10_000 {
		th.fail(fmt.Sprintf("addr:10.0.%d.%d", i/256, i%256))
	}
	if n := th.len(); n != 100 {
		t.Fatalf("%d addresses tracked after 10,000 failed, want the bound 100", n)
	}
	now = now.Add(time.Minute)
	th.fail("addr:late")
	if th.blocked("addr:late") != 0 {
		t.Fatal("one failure blocks")
	}
}

// Behind configured proxies the client is the first untrusted hop of
// X-Forwarded-For; from anyone else the header is ignored.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	cases := []struct{ remote, xff, want string }{
		{"192.0.2.7:5555", "", "192.0.2.7"},
		{"192.0.2.7:5555", "203.0.113.9", "192.0.2.7"}, // spoofed: not from a proxy
		{"10.1.2.3:5555", "203.0.113.9", "203.0.113.9"},
		{"10.1.2.3:5555", "198.51.100.1, 203.0.113.9, 10.9.9.9", "203.0.113.9"},
		{"10.1.2.3:5555", "", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:443", "", "2001:db8:1:2::/64"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := s.clientAddr(r); got != c.want {
			t.Errorf("client of %s with X-Forwarded-For %q = %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8080": true, "localhost": true, "LOCALHOST:80": true, "[::1]:8080": true, "[::1]": true, "::1": true,
		"evil.example": false, "evil.example:8080": false, "127.0.0.1.evil.example": false, "localhost.evil.example": false,
		"10.0.0.1:8080": false, "": false, "0.0.0.0:8080": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// A body is read in full up to the limit and hashed as it is read; one
// byte more is refused, and nothing past limit+1 is ever read.
func TestReadHashed(t *testing.T) {
	t.Parallel()
	for _, declared := range []int64{-1, 0, 10, 1000} {
		for _, n := range []int{0, 1, 999, 1000, 1001, 5000} {
			body := bytes.Repeat([]byte("a"), n)
			src := &countingReader{r: bytes.NewReader(body)}
			got, err := readHashed(src, 1000, declared, whatsapp.NewMAC("s"))
			switch {
			case n > 1000:
				if !errors.Is(err, errTooLarge) || src.n > 1001 {
					t.Errorf("%d bytes (declared %d): %v after reading %d", n, declared, err, src.n)
				}
			case err != nil || !bytes.Equal(got.data, body) || !whatsapp.VerifySignature("s", body, "sha256="+fmt.Sprintf("%x", got.sum)):
				t.Errorf("%d bytes (declared %d): %v, %d bytes back", n, declared, err, len(got.data))
			}
		}
	}
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A signed but malformed webhook is answered with the JSON path, never the
// Go types of the parser.
func TestWebhookProblemInContractWords(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`{"object":"whatsapp_business_account","entry":{}}`:                                                           "entry: must be an array",
		`{"object":"whatsapp_business_account","entry":"x"}`:                                                          "entry: must be an array",
		`{"object":"whatsapp_business_account","entry":[{"changes":{}}]}`:                                             "changes: must be an array",
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":1}]}]}`:                                  "field: must be a string",
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":[]}]}]}`:              "value: must be an object",
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":{}}}]}]}`: "messages: must be an array",
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"metadata":[]}}]}]}`: "metadata",
		`{"object":1}`: "object: must be a string",
		`{"object":"whatsapp_business_account","entry":[}`: "not valid JSON",
	}
	for body, want := range cases {
		_, err := whatsapp.ParseWebhook([]byte(body))
		if err == nil {
			t.Errorf("%s: parsed", body)
			continue
		}
		got := webhookProblem(err)
		if !strings.Contains(got, want) || goWords(got) {
			t.Errorf("%s: %q, want it to say %q in JSON terms", body, got, want)
		}
	}
}

// goWords reports whether a message shows Go's names for things.
func goWords(msg string) bool {
	for _, w := range []string{"Go ", "struct", "webhookEnvelope", "webhookValue", "json.RawMessage", "[]", "map[", "interface", "json: "} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// FuzzWebhookEnvelope parses any body as a webhook: the parser never
// panics, and whatever it refuses is worded without Go's type names.
func FuzzWebhookEnvelope(f *testing.F) {
	f.Add([]byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"from":"1","id":"w","type":"text"}]}}]}]}`))
	f.Add([]byte(`{"object":"whatsapp_business_account","entry":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := whatsapp.ParseWebhook(body)
		if err != nil && goWords(webhookProblem(err)) {
			t.Fatalf("%q answered %q", body, webhookProblem(err))
		}
	})
}

// FuzzParseNewMessage reads any REST message body as the endpoint does:
// never a panic; an accepted body has ids the contract allows, a payload
// that is a JSON object, and ids that are exactly what the body said (a
// U+FFFD in an id was in the body, not made by decoding).
func FuzzParseNewMessage(f *testing.F) {
	f.Add([]byte(`{"message_id":"m1","conversation_id":"c1","type":"text","text":{"body":"hi"}}`))
	f.Add([]byte(`{"message_id":"m\ud800","conversation_id":"c1","type":"text"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if checkText(body) != nil {
			return
		}
		m, err := parseNewMessage("acme", body, "")
		if err != nil {
			if goWords(err.Error()) {
				t.Fatalf("%q refused as %v", body, err)
			}
			return
		}
		for field, id := range map[string]string{"message_id": m.MessageID, "conversation_id": m.ConversationID} {
			if err := checkID(field, id); err != nil {
				t.Fatalf("%q accepted with %s %q: %v", body, field, id, err)
			}
			if strings.ContainsRune(id, utf8.RuneError) && !bytes.Contains(body, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
				t.Fatalf("%q: %s %q has a U+FFFD the body did not", body, field, id)
			}
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(m.Payload, &obj) != nil || obj == nil {
			t.Fatalf("%q accepted with payload %s", body, m.Payload)
		}
	})
}

// A flood of requests for one slug is one lookup, and a request that leaves
// does not fail the others waiting on it.
func TestChannelCacheOneLoadPerSlug(t *testing.T) {
	t.Parallel()
	var loads atomic.Int32
	release := make(chan struct{})
	c := newChannelCache(time.Minute, 10, func(ctx context.Context, slug string) (channel, error) {
		loads.Add(1)
		<-release
		return channel{found: slug == "acme"}, nil
	})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.get(gone, "acme"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", err)
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ch, err := c.get(context.Background(), "acme"); err != nil || !ch.found {
				t.Errorf("get: %+v, %v", ch, err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads for one slug, want 1", n)
	}
	for i := range 50 {
		_, _ = c.get(context.Background(), fmt.Sprintf("stranger-%d", i))
	}
	if n := len(c.m); n > 10 {
		t.Fatalf("%d slugs cached, want at most 10", n)
	}
}
