package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// logBuffer is a log sink many goroutines write to.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// options shape a test server.
type options struct {
	jobs jobstest.Options
	web  web.Config
	// captureLogs sends the server's, the engine's and the workers' logs, at
	// debug level and as JSON, into env.logs.
	captureLogs bool
	// sandboxChannel points the workers at the server's own sandbox (which
	// it turns on) instead of the fake Cloud API.
	sandboxChannel bool
	// wrap, if set, stands in front of the server's handler.
	wrap func(http.Handler) http.Handler
}

// env is a running engine behind a real HTTP server.
type env struct {
	*jobstest.Bundle
	URL    string
	client *http.Client
	logs   *logBuffer
}

// start runs web.New(...).Handler() in an httptest.Server on top of
// jobstest.Setup (real Postgres, real workers, fake Cloud API).
func start(t *testing.T, o options) *env {
	t.Helper()
	logs := &logBuffer{}
	var logger *slog.Logger
	if o.captureLogs {
		logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.jobs.Logger = logger
	}
	// The listener comes first so the workers can be told the server's URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	if o.sandboxChannel {
		o.web.Sandbox = true
		o.jobs.Config.WhatsAppAPIURL = base + "/sandbox/v23.0"
	}
	b := jobstest.Setup(t, o.jobs)
	var h http.Handler = web.New(o.web, b.Engine, b.Tenants, b.Vault, logger).Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{Bundle: b, URL: base, client: newClient(t, 8), logs: logs}
}

// newClient keeps enough idle connections per host for conns concurrent
// requests, so a burst does not open and close a connection per request,
// and checks every answer against the OpenAPI document (openapi_test.go).
func newClient(t testing.TB, conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	return contractClient(t, &http.Client{Transport: tr, Timeout: 30 * time.Second})
}

// answer is an HTTP answer, read in full.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body)) }

// request describes one call; key is the bearer API key ("" for none).
type request struct {
	method, path, key string
	contentType       string // default application/json when there is a body
	body              string
	header            http.Header
}

// send makes a call; it does not touch t, so client goroutines may use it.
func (e *env) send(r request) (answer, error) {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, e.URL+r.path, body)
	if err != nil {
		return answer{}, err
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	switch {
	case r.contentType == "-":
	case r.contentType != "":
		req.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (e *env) call(t *testing.T, r request) answer {
	t.Helper()
	a, err := e.send(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return a
}

func (e *env) get(t *testing.T, key, path string) answer {
	t.Helper()
	return e.call(t, request{method: http.MethodGet, path: path, key: key})
}

func (e *env) post(t *testing.T, key, path string, v any) answer {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return e.call(t, request{method: http.MethodPost, path: path, key: key, body: string(body)})
}

// decode unmarshals a's JSON body into a value of type T or fails the test.
func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("answer %s is not the expected JSON: %v", a, err)
	}
	return v
}

// outbound is a REST body for an outbound text message.
func outbound(messageID, conv, text string) map[string]any {
	return map[string]any{"message_id": messageID, "conversation_id": conv, "type": "text", "text": map[string]string{"body": text}}
}

// mustStatus fails the test unless a has status want.
func mustStatus(t *testing.T, what string, a answer, want int) {
	t.Helper()
	if a.status != want {
		t.Fatalf("%s: got %s, want status %d", what, a, want)
	}
}

// mustError checks the contract's error answer: status, JSON content type,
// {"error":{"code","message"}} and nothing else.
func mustError(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	if a.status != status {
		t.Errorf("%s: got %s, want status %d", what, a, status)
		return
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(a.body, &body); err != nil || len(body) != 1 || len(body["error"]) != 2 {
		t.Errorf(`%s: body %s is not {"error":{"code","message"}}`, what, a.body)
		return
	}
	if got, _ := body["error"]["code"].(string); got != code {
		t.Errorf("%s: error code %q, want %q (%s)", what, got, code, a.body)
	}
	if msg, _ := body["error"]["message"].(string); msg == "" {
		t.Errorf("%s: empty error message", what)
	}
}

// waitStatus polls the message through the API until it has status.
func (e *env) waitStatus(t *testing.T, key, messageID, status string) engine.Message {
	t.Helper()
	var m engine.Message
	e.WaitFor(messageID+" "+status, 20*time.Second, func() bool {
		a := e.get(t, key, "/v1/messages/"+url.PathEscape(messageID))
		if a.status != http.StatusOK {
			return false
		}
		m = decode[engine.Message](t, a)
		return m.Status == status
	})
	return m
}

// Issue 3's acceptance: concurrent HTTP clients, one per conversation posting
// its messages in order, every message posted twice (half of the copies at
// the very moment of the original). Each is accepted once (202, and 200
// duplicate with the same id and seq for the copy), and the provider receives
// every message exactly once, each conversation in posting order.
func TestConcurrentClientsEveryMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	convs, perConv := 200, 25
	if testing.Short() {
		convs, perConv = 40, 10
	}
	// Generous send timeouts: on a loaded machine a send that outlives its
	// timeout is ambiguous and, with no status webhook to reconcile it, sent
	// again — the one duplicate the contract allows, not what this tests.
	e := start(t, options{jobs: jobstest.Options{Config: jobs.Config{SendTimeout: 20 * time.Second, HandlerTimeout: 20 * time.Second, Lease: 30 * time.Second}}})
	e.client = newClient(t, 2*convs+8)
	// Every conversation sends from the tenant's one phone number, which is
	// paced at Meta's 80 sends/s by default: 5000 sends would take a minute
	// of pacing alone. Pacing has its own tests; this one is about accepting
	// once and sending in order.
	unpaced := 0
	if _, err := e.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: &unpaced}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()

	expected := make(map[string][]string, convs)
	var originals, repeats atomic.Int64
	var wg sync.WaitGroup
	for c := range convs {
		conv := fmt.Sprintf("1650555%04d", c)
		texts := make([]string, perConv)
		for k := range perConv {
			texts[k] = fmt.Sprintf("%s #%d", conv, k)
		}
		expected[conv] = texts
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perConv {
				id := fmt.Sprintf("wamid.%s-%d", conv, k)
				body, _ := json.Marshal(outbound(id, conv, texts[k]))
				r := request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: string(body)}
				var (
					answers [2]answer
					errs    [2]error
				)
				if rand.IntN(2) == 0 {
					// Both copies wait at the gate and fire together.
					gate := make(chan struct{})
					var pair sync.WaitGroup
					for i := range 2 {
						pair.Add(1)
						go func() {
							defer pair.Done()
							<-gate
							answers[i], errs[i] = e.send(r)
						}()
					}
					close(gate)
					pair.Wait()
				} else {
					for i := range 2 {
						answers[i], errs[i] = e.send(r)
					}
				}
				if errs[0] != nil || errs[1] != nil {
					t.Errorf("%s: %v / %v", id, errs[0], errs[1])
					return
				}
				if answers[0].status == http.StatusOK {
					answers[0], answers[1] = answers[1], answers[0]
				}
				if answers[0].status != http.StatusAccepted || answers[1].status != http.StatusOK {
					t.Errorf("%s: answers %s and %s, want one 202 and one 200", id, answers[0], answers[1])
					return
				}
				var orig, dup engine.Accepted
				if json.Unmarshal(answers[0].body, &orig) != nil || json.Unmarshal(answers[1].body, &dup) != nil {
					t.Errorf("%s: answers %s and %s are not JSON", id, answers[0], answers[1])
					return
				}
				if orig.Duplicate || !dup.Duplicate || orig.ID != dup.ID || orig.Seq != dup.Seq || orig.Seq != int64(k+1) ||
					dup.MessageID != id || dup.ConversationID != conv {
					t.Errorf("%s: original %+v, repeat %+v; want the repeat to be the original (seq %d) with duplicate true", id, orig, dup, k+1)
					return
				}
				originals.Add(1)
				repeats.Add(1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	accepted, sentByThen := time.Since(begin), len(e.WhatsApp.Sends())
	total := convs * perConv
	if originals.Load() != int64(total) || repeats.Load() != int64(total) {
		t.Fatalf("%d originals and %d repeats answered, want %d each", originals.Load(), repeats.Load(), total)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(ctx, total); err != nil {
		t.Fatalf("waiting for the provider: %v", err)
	}
	e.WaitFor("every conversation to finish", 20*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq = last_seq AND last_seq = $1`, perConv) == convs
	})
	time.Sleep(300 * time.Millisecond) // a duplicate send, if any, would arrive now
	rep := whatsapptest.Check(e.WhatsApp.Sends(), expected)
	if !rep.OK() || rep.Sent != total {
		t.Fatalf("the provider saw %s (want sent=%d and nothing else; %d sends were ambiguous):\n%s", rep, total,
			e.Count(`SELECT count(*) FROM ordo.steps WHERE ambiguous_count > 0`), strings.Join(rep.Details, "\n"))
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`); n != total {
		t.Fatalf("%d messages done, want %d", n, total)
	}
	t.Logf("%d messages × 2 posts over HTTP: all answered in %s (%d sent by then), all sent in %s",
		total, accepted.Round(time.Millisecond), sentByThen, time.Since(begin).Round(time.Millisecond))
}

// A tenant's key reaches only its own data: another tenant's message,
// conversation and dead letters are "not found" (never "forbidden", which
// would confirm they exist), and trying to act on them changes nothing.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	ctx := context.Background()
	other, err := e.Tenants.Create(ctx, tenants.CreateParams{Slug: "globex", Name: "Globex"})
	if err != nil {
		t.Fatal(err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": "2000002", "access_token": "EAAG-globex-token", "app_secret": "globex-app-secret", "verify_token": "v"})
	if err := e.Vault.Put(ctx, e.Pool, other.Tenant.ID, "whatsapp", cred); err != nil {
		t.Fatal(err)
	}
	e.WhatsApp.SetResponder(func(req whatsapptest.Send, n int) whatsapptest.Response {
		if strings.HasPrefix(req.Text, "fail") {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, n)
	})
	keyA, keyB := e.APIKey, other.APIKey

	mustStatus(t, "B posts", e.post(t, keyB, "/v1/messages", outbound("b-m1", "b-c1", "fail b1")), http.StatusAccepted)
	mustStatus(t, "B posts", e.post(t, keyB, "/v1/messages", outbound("b-m2", "b-c1", "b two")), http.StatusAccepted)
	mustStatus(t, "B posts", e.post(t, keyB, "/v1/messages", outbound("shared-id", "b-c2", "b shared")), http.StatusAccepted)
	e.waitStatus(t, keyB, "b-m1", "dead")
	e.waitStatus(t, keyB, "shared-id", "done")
	list := decode[struct {
		DeadLetters []engine.DeadLetter `json:"dead_letters"`
	}](t, e.get(t, keyB, "/v1/dead-letters"))
	if len(list.DeadLetters) != 1 || list.DeadLetters[0].MessageID != "b-m1" {
		t.Fatalf("B's dead letters: %+v, want b-m1's", list.DeadLetters)
	}
	dl := list.DeadLetters[0].ID

	for _, c := range []struct{ what, method, path string }{
		{"B's message", http.MethodGet, "/v1/messages/b-m1"},
		{"B's conversation", http.MethodGet, "/v1/conversations/b-c1"},
		{"B's dead letter", http.MethodGet, "/v1/dead-letters/" + dl},
		{"replay of B's dead letter", http.MethodPost, "/v1/dead-letters/" + dl + "/replay"},
		{"skip of B's dead letter", http.MethodPost, "/v1/dead-letters/" + dl + "/skip"},
	} {
		mustError(t, "A's key on "+c.what, e.call(t, request{method: c.method, path: c.path, key: keyA}), http.StatusNotFound, "not_found")
	}
	for _, q := range []string{"", "?conversation_id=b-c1", "?state=all"} {
		a := e.get(t, keyA, "/v1/dead-letters"+q)
		mustStatus(t, "A lists dead letters", a, http.StatusOK)
		if strings.Contains(string(a.body), "b-m1") {
			t.Errorf("A's dead-letter listing %s shows B's: %s", q, a.body)
		}
	}
	// Message ids are unique per tenant: A's "shared-id" is A's own message.
	a := e.post(t, keyA, "/v1/messages", outbound("shared-id", "a-c1", "a shared"))
	if mustStatus(t, "A posts B's message id", a, http.StatusAccepted); decode[engine.Accepted](t, a).Duplicate {
		t.Error("A's message was taken for a duplicate of B's")
	}

	// B's data is as it was.
	d := decode[engine.DeadLetter](t, e.get(t, keyB, "/v1/dead-letters/"+dl))
	if d.ResolvedAt != nil || d.Resolution != "" {
		t.Errorf("B's dead letter changed: %+v", d)
	}
	conv := decode[engine.Conversation](t, e.get(t, keyB, "/v1/conversations/b-c1"))
	if conv.Status != "halted" || conv.HeadSeq != 0 || conv.LastSeq != 2 {
		t.Errorf("B's conversation = %s/%d/%d, want halted at head 0 of 2", conv.Status, conv.HeadSeq, conv.LastSeq)
	}
	if m := decode[engine.Message](t, e.get(t, keyB, "/v1/messages/b-m2")); m.Status != "queued" {
		t.Errorf("b-m2 is %s, want still queued behind the dead letter", m.Status)
	}
	for _, s := range e.WhatsApp.Sends() {
		if s.Text == "b two" {
			t.Error("b-m2 was sent past B's halted conversation")
		}
	}

	// A revoked key stops at once; a missing or garbage one never starts.
	key2, prefix, err := e.Tenants.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, "second key", e.get(t, key2, "/v1/dead-letters"), http.StatusOK)
	if err := e.Tenants.RevokeAPIKey(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	mustError(t, "revoked key", e.get(t, key2, "/v1/dead-letters"), http.StatusUnauthorized, "unauthorized")
	mustError(t, "revoked key posting", e.post(t, key2, "/v1/messages", outbound("revoked-1", "a-c9", "x")), http.StatusUnauthorized, "unauthorized")
	for name, auth := range map[string]string{
		"missing":         "",
		"basic":           "Basic dXNlcjpwYXNz",
		"bearer only":     "Bearer",
		"empty bearer":    "Bearer ",
		"garbage":         "Bearer garbage",
		"key + extra":     "Bearer " + keyA + "x",
		"sql":             "Bearer ' OR 1=1 --",
		"other's shape":   "Bearer ordo_00000000_" + strings.Repeat("0", 32),
		"key without tag": keyA,
	} {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		body, _ := json.Marshal(outbound("unauth-"+name, "a-c9", "x"))
		mustError(t, "authorization "+name, e.call(t, request{method: http.MethodPost, path: "/v1/messages", header: h, body: string(body)}), http.StatusUnauthorized, "unauthorized")
		mustError(t, "authorization "+name, e.call(t, request{method: http.MethodGet, path: "/v1/messages/shared-id", header: h}), http.StatusUnauthorized, "unauthorized")
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'unauth-%' OR message_id = 'revoked-1'`); n != 0 {
		t.Errorf("%d messages stored without a valid key", n)
	}
}

// Bad input gets the contract's error with the right status and stores
// nothing; ids at the limit, and SQL-looking ids, are data like any other.
func TestBadInputStoresNothing(t *testing.T) {
	t.Parallel()
	const limit = 4096
	e := start(t, options{web: web.Config{MaxBodyBytes: limit}})
	key := e.APIKey
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	long := func(n int) string { return strings.Repeat("x", n) }
	msg := func(fields map[string]any) string {
		m := map[string]any{"message_id": "m1", "conversation_id": "c1", "type": "text", "text": map[string]string{"body": "hi"}}
		for k, v := range fields {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return js(m)
	}
	cases := []struct {
		name, contentType, body string
		status                  int
		code, mentions          string
	}{
		{"malformed JSON", "", `{"message_id": "m1", "conversation_id":`, 400, "invalid_request", "JSON object"},
		{"JSON array", "", `[` + msg(nil) + `]`, 400, "invalid_request", "JSON object"},
		{"JSON null", "", `null`, 400, "invalid_request", "JSON object"},
		{"JSON string", "", `"m1"`, 400, "invalid_request", "JSON object"},
		{"trailing garbage", "", msg(nil) + `}`, 400, "invalid_request", "JSON object"},
		{"empty body", "application/json", ``, 400, "invalid_request", ""},
		{"oversized body", "", msg(map[string]any{"text": map[string]string{"body": long(limit)}}), 413, "payload_too_large", ""},
		{"text/plain", "text/plain", msg(nil), 415, "unsupported_media_type", "application/json"},
		{"form", "application/x-www-form-urlencoded", "message_id=m1&conversation_id=c1", 415, "unsupported_media_type", ""},
		{"no content type", "-", msg(nil), 415, "unsupported_media_type", ""},
		{"bad content type", "application/json; charset", msg(nil), 415, "unsupported_media_type", ""},
		{"invalid UTF-8 in an id", "", "{\"message_id\": \"m\xff1\", \"conversation_id\": \"c1\", \"type\": \"text\"}", 400, "invalid_request", "UTF-8"},
		{"invalid UTF-8 in the text", "", "{\"message_id\": \"m1\", \"conversation_id\": \"c1\", \"type\": \"text\", \"text\": {\"body\": \"\xc3\x28\"}}", 400, "invalid_request", "UTF-8"},
		{"message_id 257 chars", "", msg(map[string]any{"message_id": long(257)}), 400, "invalid_request", "message_id"},
		{"conversation_id 257 chars", "", msg(map[string]any{"conversation_id": long(257)}), 400, "invalid_request", "conversation_id"},
		{"message_id 257 two-byte chars", "", msg(map[string]any{"message_id": strings.Repeat("é", 257)}), 400, "invalid_request", "message_id"},
		{"newline in message_id", "", msg(map[string]any{"message_id": "m\n1"}), 400, "invalid_request", "message_id"},
		{"NUL in message_id", "", msg(map[string]any{"message_id": "m\x001"}), 400, "invalid_request", "NUL"},
		{"NUL in conversation_id", "", msg(map[string]any{"conversation_id": "c\x001"}), 400, "invalid_request", "NUL"},
		{"NUL in the text", "", msg(map[string]any{"text": map[string]string{"body": "a\x00b"}}), 400, "invalid_request", "NUL"},
		{"tab in conversation_id", "", msg(map[string]any{"conversation_id": "c\t1"}), 400, "invalid_request", "conversation_id"},
		{"DEL in conversation_id", "", msg(map[string]any{"conversation_id": "c\x7f1"}), 400, "invalid_request", "conversation_id"},
		{"C1 control in message_id", "", msg(map[string]any{"message_id": "m\u00851"}), 400, "invalid_request", "message_id"},
		{"numeric message_id", "", msg(map[string]any{"message_id": 123}), 400, "invalid_request", "message_id"},
		{"object conversation_id", "", msg(map[string]any{"conversation_id": map[string]any{}}), 400, "invalid_request", "conversation_id"},
		{"boolean message_id", "", msg(map[string]any{"message_id": true}), 400, "invalid_request", "message_id"},
		{"array direction", "", msg(map[string]any{"direction": []string{"inbound"}}), 400, "invalid_request", "direction"},
		{"missing message_id", "", msg(map[string]any{"message_id": nil}), 400, "invalid_request", "message_id"},
		{"empty message_id", "", msg(map[string]any{"message_id": ""}), 400, "invalid_request", "message_id"},
		{"missing conversation_id", "", msg(map[string]any{"conversation_id": nil}), 400, "invalid_request", "conversation_id"},
		{"unknown direction", "", msg(map[string]any{"direction": "sideways"}), 400, "invalid_request", "direction"},
		{"outbound without type", "", msg(map[string]any{"type": nil}), 400, "invalid_request", "type"},
		{"inbound without payload", "", msg(map[string]any{"direction": "inbound"}), 400, "invalid_request", "payload"},
		{"inbound with a string payload", "", msg(map[string]any{"direction": "inbound", "payload": "hi"}), 400, "invalid_request", "payload"},
		{"inbound with an array payload", "", msg(map[string]any{"direction": "inbound", "payload": []int{1}}), 400, "invalid_request", "payload"},
		{"inbound with a null payload", "", `{"message_id":"m1","conversation_id":"c1","direction":"inbound","payload":null}`, 400, "invalid_request", "payload"},
	}
	for _, c := range cases {
		a := e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: key, contentType: c.contentType, body: c.body})
		mustError(t, c.name, a, c.status, c.code)
		if c.mentions != "" && !strings.Contains(string(a.body), c.mentions) {
			t.Errorf("%s: message %s does not mention %q", c.name, a.body, c.mentions)
		}
	}
	for _, table := range []string{"ordo.messages", "ordo.conversations", "ordo.steps", "ordo.ready"} {
		if n := e.Count(`SELECT count(*) FROM ` + table); n != 0 {
			t.Errorf("bad input stored %d rows in %s", n, table)
		}
	}

	// Wrong routes and methods answer in the same JSON shape.
	mustError(t, "unknown endpoint", e.call(t, request{method: http.MethodGet, path: "/v1/nothing", key: key}), 404, "not_found")
	mustError(t, "unknown top-level path", e.call(t, request{method: http.MethodGet, path: "/nothing"}), 404, "not_found")
	mustError(t, "GET /v1/messages", e.call(t, request{method: http.MethodGet, path: "/v1/messages", key: key}), 405, "method_not_allowed")
	mustError(t, "DELETE a message", e.call(t, request{method: http.MethodDelete, path: "/v1/messages/m1", key: key}), 405, "method_not_allowed")
	mustError(t, "GET a replay", e.call(t, request{method: http.MethodGet, path: "/v1/dead-letters/1/replay", key: key}), 405, "method_not_allowed")
	mustError(t, "POST /healthz", e.call(t, request{method: http.MethodPost, path: "/healthz"}), 405, "method_not_allowed")
	mustError(t, "dead letters, bad limit", e.get(t, key, "/v1/dead-letters?limit=many"), 400, "invalid_request")
	mustError(t, "dead letters, limit too big", e.get(t, key, "/v1/dead-letters?limit=501"), 400, "invalid_request")
	mustError(t, "dead letters, bad state", e.get(t, key, "/v1/dead-letters?state=bogus"), 400, "invalid_request")
	mustError(t, "dead letters, bad after", e.get(t, key, "/v1/dead-letters?after=-1"), 400, "invalid_request")
	mustError(t, "dead letter, bad id", e.get(t, key, "/v1/dead-letters/x'1"), 404, "not_found")

	// At the limits, and SQL-looking: accepted, kept verbatim.
	sqlish := `'); DROP TABLE ordo.messages;--`
	for _, ids := range [][2]string{
		{long(256), long(256)},
		{strings.Repeat("é", 256), "c-é"},
		{sqlish, sqlish},
		{"a/b?c=d#e f%20", "16505551234"},
	} {
		a := e.post(t, key, "/v1/messages", outbound(ids[0], ids[1], "edge"))
		mustStatus(t, fmt.Sprintf("message_id of %d chars", len([]rune(ids[0]))), a, http.StatusAccepted)
		got := decode[engine.Accepted](t, a)
		if got.MessageID != ids[0] || got.ConversationID != ids[1] {
			t.Errorf("accepted as %q/%q, want %q/%q", got.MessageID, got.ConversationID, ids[0], ids[1])
		}
		m := decode[engine.Message](t, e.get(t, key, "/v1/messages/"+url.PathEscape(ids[0])))
		if m.MessageID != ids[0] || m.ConversationID != ids[1] {
			t.Errorf("read back as %q/%q, want %q/%q", m.MessageID, m.ConversationID, ids[0], ids[1])
		}
		c := decode[engine.Conversation](t, e.get(t, key, "/v1/conversations/"+url.PathEscape(ids[1])))
		if c.ConversationID != ids[1] || c.LastSeq != 1 {
			t.Errorf("conversation read back as %+v", c)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1 AND payload -> 'text' ->> 'body' = 'edge'`, sqlish); n != 1 {
		t.Errorf("the SQL-looking message is stored %d times, want once", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 4 {
		t.Errorf("%d messages stored, want the 4 accepted ones", n)
	}

	// A repeat with another body is refused (422); the original stays.
	mustError(t, "repeat with another body", e.post(t, key, "/v1/messages", outbound(sqlish, sqlish, "changed")), http.StatusUnprocessableEntity, "message_id_reused")
	m := decode[engine.Message](t, e.get(t, key, "/v1/messages/"+url.PathEscape(sqlish)))
	if !strings.Contains(string(m.Payload), `"edge"`) {
		t.Errorf("the repeat replaced the original's payload: %s", m.Payload)
	}
}

// The read endpoints show what a user needs to follow a message: its steps
// (kind, status, attempts, last error, provider id), the conversation's
// position, and dead letters they can replay or skip.
func TestMessageConversationAndDeadLettersOverHTTP(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"reply one"}},{"type":"text","text":{"body":"reply two"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := start(t, options{jobs: jobstest.Options{HandlerURL: handler.URL}})
	var failing atomic.Bool
	failing.Store(true)
	e.WhatsApp.SetResponder(func(req whatsapptest.Send, n int) whatsapptest.Response {
		switch {
		case req.Text == "flaky" && n == 1:
			return whatsapptest.Response{Status: http.StatusInternalServerError, ErrorCode: 131000}
		case strings.HasPrefix(req.Text, "fail") && (failing.Load() || req.Text == "fail always"):
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, n)
	})
	key := e.APIKey

	// Inbound: the handler's two replies are sent in order.
	a := e.post(t, key, "/v1/messages", map[string]any{"message_id": "in-1", "conversation_id": "u1", "direction": "inbound",
		"payload": map[string]any{"from": "u1", "text": map[string]string{"body": "hello"}}})
	mustStatus(t, "inbound", a, http.StatusAccepted)
	m := e.waitStatus(t, key, "in-1", "done")
	if len(m.Steps) != 3 || m.Steps[0].Kind != "handle" || m.Steps[1].Kind != "send" || m.Steps[2].Kind != "send" {
		t.Fatalf("in-1's steps: %+v, want handle, send, send", m.Steps)
	}
	for _, s := range m.Steps {
		if s.Status != "done" || s.Attempts != 1 || s.LastError != "" {
			t.Errorf("in-1 step %+v: want done at the first attempt", s)
		}
	}
	if m.Steps[1].ProviderMessageID == "" || m.Steps[2].ProviderMessageID == "" || m.Steps[1].ProviderMessageID == m.Steps[2].ProviderMessageID {
		t.Errorf("send steps' provider ids %q, %q: want the two wamids", m.Steps[1].ProviderMessageID, m.Steps[2].ProviderMessageID)
	}
	if m.Direction != "inbound" || m.Seq != 1 {
		t.Errorf("in-1: direction %s seq %d", m.Direction, m.Seq)
	}

	// A retried send shows both attempts; once it succeeded, no stale
	// last_error (the failed attempt stays in the admin page's timeline).
	mustStatus(t, "flaky", e.post(t, key, "/v1/messages", outbound("out-flaky", "u2", "flaky")), http.StatusAccepted)
	m = e.waitStatus(t, key, "out-flaky", "done")
	if len(m.Steps) != 1 || m.Steps[0].Kind != "send" || m.Steps[0].Attempts != 2 || m.Steps[0].LastError != "" || m.Steps[0].ProviderMessageID == "" {
		t.Errorf("out-flaky's steps: %+v, want one send done at attempt 2 and no last_error", m.Steps)
	}

	// A permanent failure dead-letters the message and halts its conversation.
	mustStatus(t, "failing", e.post(t, key, "/v1/messages", outbound("out-fail", "u3", "fail once")), http.StatusAccepted)
	mustStatus(t, "behind", e.post(t, key, "/v1/messages", outbound("out-behind", "u3", "behind")), http.StatusAccepted)
	m = e.waitStatus(t, key, "out-fail", "dead")
	if len(m.Steps) != 1 || m.Steps[0].Status != "failed" || m.Steps[0].Attempts != 1 || !strings.Contains(m.Steps[0].LastError, "131026") {
		t.Errorf("out-fail's steps: %+v, want one failed send whose error names 131026", m.Steps)
	}
	conv := decode[engine.Conversation](t, e.get(t, key, "/v1/conversations/u3"))
	if conv.Status != "halted" || conv.HeadSeq != 0 || conv.LastSeq != 2 || len(conv.Messages) != 2 || conv.Messages[0].MessageID != "out-behind" {
		t.Errorf("conversation u3: %+v, want halted with head 0, last 2, newest first", conv)
	}
	mustError(t, "unknown conversation", e.get(t, key, "/v1/conversations/nobody"), 404, "not_found")
	mustError(t, "unknown message", e.get(t, key, "/v1/messages/nothing"), 404, "not_found")

	list := decode[struct {
		DeadLetters []engine.DeadLetter `json:"dead_letters"`
	}](t, e.get(t, key, "/v1/dead-letters"))
	if len(list.DeadLetters) != 1 || list.DeadLetters[0].MessageID != "out-fail" || list.DeadLetters[0].ConversationID != "u3" ||
		!strings.Contains(list.DeadLetters[0].Reason, "131026") {
		t.Fatalf("dead letters: %+v, want out-fail's, with its reason", list.DeadLetters)
	}
	dl := list.DeadLetters[0].ID

	// Replay: the message runs again in its place, then the one behind it.
	failing.Store(false)
	a = e.call(t, request{method: http.MethodPost, path: "/v1/dead-letters/" + dl + "/replay", key: key})
	mustStatus(t, "replay", a, http.StatusOK)
	if d := decode[engine.DeadLetter](t, a); d.Resolution != "replayed" || d.ResolvedAt == nil {
		t.Errorf("replay answered %+v", d)
	}
	e.waitStatus(t, key, "out-behind", "done")
	if m := decode[engine.Message](t, e.get(t, key, "/v1/messages/out-fail")); m.Status != "done" {
		t.Errorf("out-fail after replay: %s", m.Status)
	}
	conv = decode[engine.Conversation](t, e.get(t, key, "/v1/conversations/u3"))
	if conv.Status != "active" || conv.HeadSeq != 2 || conv.LastSeq != 2 {
		t.Errorf("conversation u3 after replay: %s %d/%d, want active and caught up", conv.Status, conv.HeadSeq, conv.LastSeq)
	}
	mustError(t, "second replay", e.call(t, request{method: http.MethodPost, path: "/v1/dead-letters/" + dl + "/replay", key: key}), 409, "conflict")
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE actor = 'api:acme' AND action = 'dead_letter.replay' AND dead_letter_id = $1::bigint`, dl); n != 1 {
		t.Errorf("the tenant's replay left %d audit entries, want 1 (the refused second one none)", n)
	}
	mustError(t, "skip after replay", e.call(t, request{method: http.MethodPost, path: "/v1/dead-letters/" + dl + "/skip", key: key}), 409, "conflict")

	// Skip: the message is given up, the conversation goes on.
	mustStatus(t, "failing", e.post(t, key, "/v1/messages", outbound("out-skip", "u4", "fail always")), http.StatusAccepted)
	mustStatus(t, "behind", e.post(t, key, "/v1/messages", outbound("out-after-skip", "u4", "after skip")), http.StatusAccepted)
	e.waitStatus(t, key, "out-skip", "dead")
	list = decode[struct {
		DeadLetters []engine.DeadLetter `json:"dead_letters"`
	}](t, e.get(t, key, "/v1/dead-letters?conversation_id=u4"))
	if len(list.DeadLetters) != 1 {
		t.Fatalf("u4's dead letters: %+v", list.DeadLetters)
	}
	a = e.call(t, request{method: http.MethodPost, path: "/v1/dead-letters/" + list.DeadLetters[0].ID + "/skip", key: key})
	if mustStatus(t, "skip", a, http.StatusOK); decode[engine.DeadLetter](t, a).Resolution != "skipped" {
		t.Errorf("skip answered %s", a)
	}
	e.waitStatus(t, key, "out-after-skip", "done")
	if m := decode[engine.Message](t, e.get(t, key, "/v1/messages/out-skip")); m.Status != "skipped" {
		t.Errorf("out-skip after skip: %s", m.Status)
	}
	resolved := decode[struct {
		DeadLetters []engine.DeadLetter `json:"dead_letters"`
	}](t, e.get(t, key, "/v1/dead-letters?state=resolved"))
	if len(resolved.DeadLetters) != 2 {
		t.Errorf("resolved dead letters: %d, want 2", len(resolved.DeadLetters))
	}
	if open := decode[struct {
		DeadLetters []engine.DeadLetter `json:"dead_letters"`
	}](t, e.get(t, key, "/v1/dead-letters")); len(open.DeadLetters) != 0 {
		t.Errorf("open dead letters after replay and skip: %+v", open.DeadLetters)
	}

	rep := whatsapptest.Check(e.WhatsApp.Sends(), map[string][]string{
		"u1": {"reply one", "reply two"}, "u2": {"flaky"}, "u3": {"fail once", "behind"}, "u4": {"after skip"},
	})
	if !rep.OK() {
		t.Errorf("the provider saw %s:\n%s", rep, strings.Join(rep.Details, "\n"))
	}
}

// No secret reaches a log line or an API answer, and no message text reaches
// a log line at info level or above, through a run that signs handler calls,
// sends with the access token, fails, retries and dead-letters.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "handler-fails") {
			http.Error(w, "handler says no", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"body-reply-confidential"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := start(t, options{jobs: jobstest.Options{HandlerURL: handler.URL}, captureLogs: true})
	e.WhatsApp.SetResponder(func(req whatsapptest.Send, n int) whatsapptest.Response {
		switch {
		case strings.Contains(req.Text, "retry") && n == 1:
			return whatsapptest.Response{Status: http.StatusServiceUnavailable}
		case strings.Contains(req.Text, "dead"):
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, n)
	})
	key := e.APIKey
	var answers []answer
	keep := func(a answer) answer { answers = append(answers, a); return a }

	keep(e.post(t, key, "/v1/messages", map[string]any{"message_id": "s-in", "conversation_id": "s1", "direction": "inbound",
		"payload": map[string]any{"text": map[string]string{"body": "body-inbound-confidential"}}}))
	keep(e.post(t, key, "/v1/messages", map[string]any{"message_id": "s-in-bad", "conversation_id": "s4", "direction": "inbound",
		"payload": map[string]any{"text": map[string]string{"body": "handler-fails body-handler-confidential"}}}))
	keep(e.post(t, key, "/v1/messages", outbound("s-out", "s2", "body-outbound-confidential retry")))
	keep(e.post(t, key, "/v1/messages", outbound("s-dead", "s3", "body-dead-confidential")))
	keep(e.post(t, key, "/v1/messages", outbound("s-dead", "s3", "body-dead-confidential")))
	keep(e.post(t, "ordo_AAAAAAAA_"+strings.Repeat("B", 32), "/v1/messages", outbound("s-x", "s3", "body-unauth-confidential")))
	keep(e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: key, body: `{"message_id": "s-bad", "conversation_id": "s9", "text": {"body": "body-invalid-confidential"}}`}))
	e.waitStatus(t, key, "s-in", "done")
	e.waitStatus(t, key, "s-in-bad", "dead")
	e.waitStatus(t, key, "s-out", "done")
	e.waitStatus(t, key, "s-dead", "dead")
	for _, p := range []string{"/v1/messages/s-in", "/v1/messages/s-out", "/v1/messages/s-dead", "/v1/conversations/s3", "/v1/dead-letters", "/v1/dead-letters?state=all", "/healthz", "/readyz"} {
		keep(e.get(t, key, p))
	}

	secrets := map[string]string{
		"access token":          jobstest.AccessToken,
		"app secret":            "app-secret-x",
		"API key":               key,
		"API key's secret part": key[len("ordo_")+8+1:],
		"handler secret":        e.Secret,
	}
	if sends := e.WhatsApp.Sends(); len(sends) < 2 || sends[0].Token != jobstest.AccessToken {
		t.Fatalf("the run did not send with the access token (%d sends): the test would prove nothing", len(sends))
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg"`) || !strings.Contains(logs, "s-dead") {
		t.Fatalf("the log capture saw nothing useful (%d bytes): the test would prove nothing", len(logs))
	}
	for name, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the %s is in the logs", name)
		}
		for _, a := range answers {
			if strings.Contains(string(a.body), s) || strings.Contains(fmt.Sprint(a.header), s) {
				t.Errorf("the %s is in an API answer: %s", name, a)
			}
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec struct{ Level string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level == "DEBUG" {
			continue
		}
		if strings.Contains(line, "confidential") {
			t.Errorf("a message body is logged at %s: %s", rec.Level, line)
		}
	}
}

// /healthz says the process is up; /readyz says the database is reachable
// and migrated, and turns 503 once it is not.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	dbURL := sqltest.URL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := httptest.NewServer(web.New(web.Config{}, engine.New(pool, nil), tenants.NewStore(pool, nil), nil, nil).Handler())
	t.Cleanup(srv.Close)
	e := &env{URL: srv.URL, client: newClient(t, 2)}

	check := func(when, path string, status int, want string) {
		t.Helper()
		a := e.call(t, request{method: http.MethodGet, path: path})
		got := decode[map[string]string](t, a)
		if a.status != status || got["status"] != want {
			t.Errorf("%s: %s answered %s, want %d %q", when, path, a, status, want)
		}
	}
	check("migrated", "/healthz", 200, "ok")
	check("migrated", "/readyz", 200, "ready")
	if err := ordosql.Down(dbURL); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	check("after migrate down", "/readyz", 503, "unavailable")
	check("after migrate down", "/healthz", 200, "ok")
	if err := ordosql.Up(dbURL); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	check("migrated again", "/readyz", 200, "ready")
}

// POST /v1/messages does not look up a key that authenticated moments ago
// (Config.KeyReuse); the transaction that would store the message checks
// it instead. A key revoked in between is refused there — 401 with
// WWW-Authenticate, nothing stored — and the messages of valid keys
// committed in the same group commit are not held up by it.
func TestRevokedKeyIsRefusedByTheIngestTransaction(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	ctx := context.Background()
	key, prefix, err := e.Tenants.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, "a first message (the key is looked up)", e.post(t, key, "/v1/messages", outbound("rk-1", "rk-c1", "one")), http.StatusAccepted)
	if err := e.Tenants.RevokeAPIKey(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	// The revoked key's messages race valid ones into the same batches.
	var wg sync.WaitGroup
	answers := make([]answer, 16)
	for i := range answers {
		wg.Go(func() {
			k := e.APIKey
			if i%2 == 0 {
				k = key
			}
			answers[i] = e.post(t, k, "/v1/messages", outbound(fmt.Sprintf("rk-batch-%02d", i), fmt.Sprintf("rk-c%02d", i), "x"))
		})
	}
	wg.Wait()
	for i, a := range answers {
		if i%2 == 0 {
			mustError(t, fmt.Sprintf("revoked key, message %d", i), a, http.StatusUnauthorized, "unauthorized")
			if got := a.header.Get("WWW-Authenticate"); got == "" {
				t.Errorf("message %d: 401 without WWW-Authenticate", i)
			}
		} else {
			mustStatus(t, fmt.Sprintf("valid key, message %d", i), a, http.StatusAccepted)
		}
	}
	mustError(t, "revoked key, looked up again", e.post(t, key, "/v1/messages", outbound("rk-2", "rk-c1", "two")), http.StatusUnauthorized, "unauthorized")
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'rk-2' OR message_id IN ('rk-batch-00','rk-batch-02','rk-batch-04','rk-batch-06','rk-batch-08','rk-batch-10','rk-batch-12','rk-batch-14')`); n != 0 {
		t.Errorf("%d messages of a revoked key stored", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'rk-batch-%'`); n != 8 {
		t.Errorf("%d messages of the valid key stored, want 8", n)
	}
}
