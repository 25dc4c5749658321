package jobs_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// A tenant's handler answers the way n8n's nodes answer by default — and the
// ways a workflow goes wrong. Nothing may end as a silent "done" with the
// replies lost, and a briefly missing workflow is retried, not halted.
func TestHandlerAnswersAsN8nGivesThem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// answer is the handler's status and body for its call number n.
		answer    func(n int) (int, string)
		wantSent  []string // texts sent, in order
		wantDead  string   // part of the dead letter's reason; "" for none
		wantCalls int      // at least
	}{
		{name: "replies", answer: func(int) (int, string) {
			return 200, `{"replies":[{"type":"text","text":{"body":"r1"}},{"type":"text","text":{"body":"r2"}}]}`
		}, wantSent: []string{"r1", "r2"}},
		{name: "n8n When Last Node Finishes, All Entries", answer: func(int) (int, string) {
			return 200, `[{"replies":[{"type":"text","text":{"body":"r1"}}]}]`
		}, wantSent: []string{"r1"}},
		{name: "n8n items holding replies (a Code node's two items, All Incoming Items)", answer: func(int) (int, string) {
			return 200, `[{"replies":[{"type":"text","text":{"body":"r1"}}]},{"replies":[{"type":"text","text":{"body":"r2"}},{"type":"text","text":{"body":"r3"}}]}]`
		}, wantSent: []string{"r1", "r2", "r3"}},
		{name: "n8n items that are messages", answer: func(int) (int, string) {
			return 200, `[{"type":"text","text":{"body":"r1"}},{"type":"text","text":{"body":"r2"}}]`
		}, wantSent: []string{"r1", "r2"}},
		{name: "n8n items of another shape", answer: func(int) (int, string) {
			return 200, `[{"text":"r1"},{"text":"r2"}]`
		}, wantDead: `"Respond With: JSON"`},
		{name: "no replies, said so", answer: func(int) (int, string) { return 200, `{"replies":[]}` }},
		{name: "n8n Respond Immediately", answer: func(int) (int, string) {
			return 200, `{"message":"Workflow was started"}`
		}, wantDead: "Using 'Respond to Webhook' Node"},
		{name: "n8n node failed: empty body", answer: func(int) (int, string) { return 200, `` }, wantDead: "empty body"},
		{name: "another shape", answer: func(int) (int, string) { return 200, `{"text":"hi"}` }, wantDead: `not {"replies"`},
		{name: "n8n restarting: 404 then the answer", answer: func(n int) (int, string) {
			if n <= 2 {
				return 404, `{"code":404,"message":"The requested webhook \"POST ordo\" is not registered."}`
			}
			return 200, `{"replies":[{"type":"text","text":{"body":"after restart"}}]}`
		}, wantSent: []string{"after restart"}, wantCalls: 3},
		{name: "a redirect is not followed", answer: func(int) (int, string) { return 302, `` }, wantDead: "redirects are not followed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			var followed atomic.Bool
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					followed.Store(true)
					_, _ = io.WriteString(w, `{"replies":[]}`)
					return
				}
				status, body := tc.answer(int(calls.Add(1)))
				if status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}))
			t.Cleanup(h.Close)
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
			if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET max_attempts = 3`); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
				Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{"text":"hello"}`),
			}); err != nil {
				t.Fatal(err)
			}
			b.WaitFor("the message to finish", 15*time.Second, func() bool {
				return b.Count(`SELECT count(*) FROM ordo.messages WHERE status IN ('done', 'dead')`) == 1
			})
			var reason string
			_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
			if tc.wantDead == "" && reason != "" {
				t.Fatalf("dead-lettered (%s); want done", reason)
			}
			if tc.wantDead != "" && !strings.Contains(reason, tc.wantDead) {
				t.Fatalf("dead letter reason %q; want it to say %q", reason, tc.wantDead)
			}
			if tc.wantSent != nil {
				b.WaitFor("the replies", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == len(tc.wantSent) })
			}
			if got := texts(b.WhatsApp.Sends()); strings.Join(got, "|") != strings.Join(tc.wantSent, "|") {
				t.Fatalf("sent %v, want %v", got, tc.wantSent)
			}
			if n := int(calls.Load()); n < max(tc.wantCalls, 1) {
				t.Fatalf("handler called %d times, want at least %d", n, tc.wantCalls)
			}
			if followed.Load() {
				t.Fatal("ordo followed the handler's redirect")
			}
		})
	}
}

// The handler call's body is JSON without HTML escaping and the signature
// is over exactly the bytes sent, so n8n's Crypto node can check it over
// the text as received (Go's default would write <, >, & as \u003c…).
func TestHandlerBodyIsSignedAsSentWithoutHTMLEscaping(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 1)
	var secret atomic.Value
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if s, _ := secret.Load().(string); r.Header.Get("X-Ordo-Signature") != jobs.Sign([]byte(s), body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		select {
		case got <- body:
		default:
		}
		_, _ = io.WriteString(w, `{"replies":[]}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true})
	secret.Store(b.Secret)
	b.Start()
	if _, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in<1>&", Direction: "inbound", Payload: []byte(`{"text":"<b>Tom & Jerry</b>"}`),
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-got:
		for _, want := range []string{`<b>Tom & Jerry</b>`, `"message_id":"in<1>&"`} {
			if !bytes.Contains(body, []byte(want)) {
				t.Fatalf("handler body %s does not carry %s as is", body, want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never got a correctly signed call")
	}
}
