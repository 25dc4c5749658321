package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// POST /v1/messages/{id}/replies: an async handler's replies are checked
// like a sync answer's, reach only the tenant's own message, only one that
// waits for them, once; every refusal stores nothing.
func TestRepliesEndpoint(t *testing.T) {
	t.Parallel()
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"message":"Workflow was started"}`)
	}))
	t.Cleanup(h.Close)
	e := start(t, options{jobs: jobstest.Options{HandlerURL: h.URL}, web: web.Config{MaxBodyBytes: 4096}})
	ctx := context.Background()
	mode := "async"
	if _, err := e.Tenants.Update(ctx, e.Tenant.Slug, tenants.UpdateParams{HandlerMode: &mode}); err != nil {
		t.Fatal(err)
	}
	other := e.AddTenant("other", "2000002", tenants.UpdateParams{})
	otherKey, _, err := e.Tenants.CreateAPIKey(ctx, other.Slug)
	if err != nil {
		t.Fatal(err)
	}
	if a := e.post(t, e.APIKey, "/v1/messages", map[string]any{"message_id": "in1", "conversation_id": "c1", "direction": "inbound", "payload": map[string]any{"text": "hi"}}); a.status != http.StatusAccepted {
		t.Fatalf("inbound: %s", a)
	}
	if a := e.post(t, e.APIKey, "/v1/messages", map[string]any{"message_id": "out1", "conversation_id": "c2", "type": "text", "text": map[string]any{"body": "x"}}); a.status != http.StatusAccepted {
		t.Fatalf("outbound: %s", a)
	}
	e.WaitFor("in1 to wait for its replies", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.steps WHERE kind = 'handle' AND status = 'waiting'`) == 1
	})

	if a := e.get(t, e.APIKey, "/v1/messages/in1"); !strings.Contains(string(a.body), `"status":"waiting"`) || !strings.Contains(string(a.body), `"replies_due_at"`) {
		t.Fatalf("GET in1 while it waits: %s; want its handle step waiting, with its deadline", a)
	}
	good := `{"replies":[{"type":"text","text":{"body":"r1"}},{"type":"text","text":{"body":"r2"}}]}`
	for _, tc := range []struct {
		name, key, path, body string
		status                int
		code, message         string
	}{
		{name: "a reply WhatsApp would refuse", key: e.APIKey, path: "/v1/messages/in1/replies",
			body: `{"replies":[{"type":"text","text":{"body":"ok"}},{"type":"text","text":{}}]}`, status: 400, code: "invalid_request", message: "replies[1].text.body"},
		{name: "replies not an array", key: e.APIKey, path: "/v1/messages/in1/replies", body: `{"replies":"hi"}`, status: 400, code: "invalid_request"},
		{name: "no replies field", key: e.APIKey, path: "/v1/messages/in1/replies", body: `{"reply":[]}`, status: 400, code: "invalid_request", message: "replies: required"},
		{name: "a reply not an object", key: e.APIKey, path: "/v1/messages/in1/replies", body: `{"replies":["hi"]}`, status: 400, code: "invalid_request", message: "replies[0]"},
		{name: "another tenant's message", key: otherKey, path: "/v1/messages/in1/replies", body: good, status: 404, code: "not_found"},
		{name: "no such message", key: e.APIKey, path: "/v1/messages/nope/replies", body: good, status: 404, code: "not_found"},
		{name: "an outbound message", key: e.APIKey, path: "/v1/messages/out1/replies", body: good, status: 409, code: "not_waiting", message: "outbound"},
		{name: "over the body limit", key: e.APIKey, path: "/v1/messages/in1/replies",
			body: `{"replies":[{"type":"text","text":{"body":"` + strings.Repeat("x", 5000) + `"}}]}`, status: 413, code: "payload_too_large"},
		{name: "no key", path: "/v1/messages/in1/replies", body: good, status: 401, code: "unauthorized"},
	} {
		a := e.call(t, request{method: http.MethodPost, path: tc.path, key: tc.key, body: tc.body})
		var got struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(a.body, &got)
		if a.status != tc.status || got.Error.Code != tc.code || !strings.Contains(got.Error.Message, tc.message) {
			t.Errorf("%s: %s; want %d %s %q", tc.name, a, tc.status, tc.code, tc.message)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.steps WHERE replies IS NOT NULL OR (kind = 'send' AND request->'text'->>'body' <> 'x')`); n != 0 {
		t.Fatalf("refused replies stored: %d steps", n)
	}

	a := e.call(t, request{method: http.MethodPost, path: "/v1/messages/in1/replies", key: e.APIKey, body: good})
	if a.status != http.StatusAccepted || !strings.Contains(string(a.body), `"replies":2`) {
		t.Fatalf("replies: %s", a)
	}
	if a := e.call(t, request{method: http.MethodPost, path: "/v1/messages/in1/replies", key: e.APIKey, body: good}); a.status != http.StatusOK || !strings.Contains(string(a.body), `"duplicate":true`) {
		t.Fatalf("the same replies again: %s; want 200 duplicate", a)
	}
	e.WaitFor("in1 done", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'in1' AND status = 'done'`) == 1
	})
	a = e.call(t, request{method: http.MethodPost, path: "/v1/messages/in1/replies", key: e.APIKey, body: `{"replies":[]}`})
	if a.status != http.StatusConflict || !strings.Contains(string(a.body), `"code":"conflict"`) {
		t.Fatalf("other replies after the first: %s; want 409 conflict", a)
	}
	if got := e.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'in1' AND s.kind = 'send' AND s.status = 'done'`); got != 2 {
		t.Fatalf("in1 sent %d replies, want 2", got)
	}
	// A sync tenant's message that was answered: not waiting.
	sync := "sync"
	if _, err := e.Tenants.Update(ctx, e.Tenant.Slug, tenants.UpdateParams{HandlerMode: &sync}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Engine.PostReplies(ctx, e.Tenant.ID, "out1", json.RawMessage(`[]`)); engine.ErrorCode(err) != engine.CodeNotWaiting {
		t.Fatalf("replies for an outbound message: %v", err)
	}
}
