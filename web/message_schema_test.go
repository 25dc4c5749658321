package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/web"
)

// An outbound message WhatsApp would refuse is refused at POST /v1/messages:
// 400 invalid_request naming the JSON path and the rule, and nothing stored.
// Inbound messages are Meta's events and pass as they are.
func TestOutboundMessageCheckedAgainstTheSchema(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	cases := []struct{ name, body, message string }{
		{"type is a number", `{"message_id":"bad-1","conversation_id":"c1","type":123,"text":{"body":"hi"}}`,
			"type: must be one of text, template, image, audio, video, document, sticker, interactive, location, reaction, contacts"},
		{"text is a string", `{"message_id":"bad-2","conversation_id":"c1","type":"text","text":"hi"}`, "text: must be an object"},
		{"number beyond float64", `{"message_id":"bad-3","conversation_id":"c1","type":"location","location":{"latitude":1e999,"longitude":0}}`,
			"location.latitude: number out of range"},
		{"body missing", `{"message_id":"bad-4","conversation_id":"c1","type":"text","text":{}}`, "text.body: required"},
		{"body too long", `{"message_id":"bad-5","conversation_id":"c1","type":"text","text":{"body":"` + strings.Repeat("a", 4097) + `"}}`,
			"text.body: longer than 4096 characters"},
		{"button title too long", `{"message_id":"bad-6","conversation_id":"c1","type":"interactive","interactive":{"type":"button","body":{"text":"Pick"},"action":{"buttons":[{"type":"reply","reply":{"id":"a","title":"` + strings.Repeat("t", 21) + `"}}]}}}`,
			"interactive.action.buttons[0].reply.title: longer than 20 characters"},
		{"to is a number", `{"message_id":"bad-7","conversation_id":"c1","to":16505551234,"type":"text","text":{"body":"hi"}}`, "to: must be a string"},
		{"unknown field", `{"message_id":"bad-8","conversation_id":"c1","type":"text","text":{"body":"hi"},"priority":"high"}`, "priority: not allowed"},
	}
	for _, c := range cases {
		a := e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: c.body})
		mustError(t, c.name, a, http.StatusBadRequest, "invalid_request")
		var got struct{ Error struct{ Message string } }
		_ = json.Unmarshal(a.body, &got)
		if got.Error.Message != c.message {
			t.Errorf("%s: message %q, want %q", c.name, got.Error.Message, c.message)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 0 {
		t.Errorf("refused messages stored %d rows", n)
	}

	// The same message, right, is accepted; an inbound message's payload is
	// not an outbound message and is not checked.
	mustStatus(t, "valid outbound", e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey,
		body: `{"message_id":"ok-1","conversation_id":"c1","type":"text","text":{"body":"hi"}}`}), http.StatusAccepted)
	mustStatus(t, "inbound", e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey,
		body: `{"message_id":"in-1","conversation_id":"c2","direction":"inbound","payload":{"type":"unsupported","errors":[{"code":131051}]}}`}), http.StatusAccepted)
}

// The sandbox refuses what the schema refuses, in the Cloud API's error
// shape, and records nothing; a valid send is answered with a wamid.
func TestSandboxRefusesInvalidSend(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{Sandbox: true}})
	send := func(body string) answer {
		return e.call(t, request{method: http.MethodPost, path: "/sandbox/v23.0/1000001/messages", key: "sandbox-token", body: body})
	}
	a := send(`{"messaging_product":"whatsapp","to":"16505551234","type":"text","text":{"body":""},"biz_opaque_callback_data":"step-1"}`)
	var refusal struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.body, &refusal); err != nil || a.status != http.StatusBadRequest || refusal.Error.Code != 100 ||
		!strings.HasSuffix(refusal.Error.Message, "text.body: must not be empty") {
		t.Errorf("invalid send: got %s, want 400 with error code 100 naming text.body", a)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.sandbox_sends`); n != 0 {
		t.Errorf("the sandbox recorded %d refused sends", n)
	}
	a = send(`{"messaging_product":"whatsapp","to":"16505551234","type":"text","text":{"body":"hi"},"biz_opaque_callback_data":"step-1"}`)
	if a.status != http.StatusOK || !strings.Contains(string(a.body), "wamid.") {
		t.Errorf("valid send: got %s, want 200 with a wamid", a)
	}
}
