package whatsapp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVerifySignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	const secret = "6f1c0d2a9e8b7c6d5e4f3a2b1c0d9e8f"
	good := Sign(secret, body)
	goodHex := strings.TrimPrefix(good, "sha256=")

	tests := []struct {
		name   string
		secret string
		body   []byte
		header string
		want   bool
	}{
		{"genuine", secret, body, good, true},
		{"upper-case hex", secret, body, "sha256=" + strings.ToUpper(goodHex), true},
		{"surrounding spaces", secret, body, " " + good + " ", true},
		{"upper-case algorithm", secret, body, "SHA256=" + goodHex, true},
		{"missing header", secret, body, "", false},
		{"prefix only", secret, body, "sha256=", false},
		{"no prefix", secret, body, goodHex, false},
		{"sha1 header", secret, body, "sha1=" + goodHex[:40], false},
		{"not hex", secret, body, "sha256=" + strings.Repeat("zz", 32), false},
		{"odd length", secret, body, good[:len(good)-1], false},
		{"truncated digest", secret, body, good[:len(good)-2], false},
		{"digest plus extra", secret, body, good + "00", false},
		{"wrong secret", "other-secret", body, good, false},
		{"empty secret", "", body, Sign("", body), false},
		{"body changed", secret, append([]byte(" "), body...), good, false},
		{"body re-encoded", secret, []byte(`{"object": "whatsapp_business_account", "entry": []}`), good, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := VerifySignature(tt.secret, tt.body, tt.header); got != tt.want {
				t.Errorf("VerifySignature = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSignMatchesMetaAlgorithm(t *testing.T) {
	t.Parallel()
	// Independent computation: HMAC-SHA256 of the raw bytes, hex, "sha256=".
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte("payload"))
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if got := Sign("s3cret", []byte("payload")); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestVerifyHandshake(t *testing.T) {
	t.Parallel()
	q := func(mode, token, challenge string) url.Values {
		v := url.Values{}
		if mode != "" {
			v.Set("hub.mode", mode)
		}
		if token != "" {
			v.Set("hub.verify_token", token)
		}
		if challenge != "" {
			v.Set("hub.challenge", challenge)
		}
		return v
	}
	tests := []struct {
		name      string
		q         url.Values
		token     string
		challenge string
		ok        bool
	}{
		{"genuine", q("subscribe", "vt-123", "1158201444"), "vt-123", "1158201444", true},
		{"wrong token", q("subscribe", "vt-999", "1158201444"), "vt-123", "", false},
		{"token prefix", q("subscribe", "vt-12", "1158201444"), "vt-123", "", false},
		{"wrong mode", q("unsubscribe", "vt-123", "1158201444"), "vt-123", "", false},
		{"no mode", q("", "vt-123", "1158201444"), "vt-123", "", false},
		{"tenant without verify token", q("subscribe", "", "1158201444"), "", "", false},
		{"no challenge", q("subscribe", "vt-123", ""), "vt-123", "", false},
		{"control characters in challenge", q("subscribe", "vt-123", "12\n<script>"), "vt-123", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			challenge, ok := VerifyHandshake(tt.q, tt.token)
			if ok != tt.ok || challenge != tt.challenge {
				t.Errorf("VerifyHandshake = %q, %v; want %q, %v", challenge, ok, tt.challenge, tt.ok)
			}
		})
	}
}

func TestStatusRank(t *testing.T) {
	t.Parallel()
	// apply is the rule StatusRank documents: a status replaces the current
	// one only if it ranks higher.
	apply := func(current, next string) string {
		if StatusRank(next) > StatusRank(current) {
			return next
		}
		return current
	}
	tests := []struct {
		sequence []string
		final    string
	}{
		{[]string{"sent", "delivered", "read"}, "read"},
		{[]string{"read", "delivered", "sent"}, "read"},
		{[]string{"sent", "read"}, "read"}, // delivered skipped by Meta
		{[]string{"sent", "failed"}, "failed"},
		{[]string{"failed", "sent"}, "failed"},
		{[]string{"delivered", "failed"}, "delivered"},
		{[]string{"read", "failed"}, "read"},
		{[]string{"failed", "delivered"}, "delivered"},
		{[]string{"delivered", "played"}, "played"},
		{[]string{"read", "played"}, "read"},
		{[]string{"sent", "something_new"}, "sent"},
		{[]string{"something_new", "sent"}, "sent"},
	}
	for _, tt := range tests {
		cur := ""
		for _, s := range tt.sequence {
			cur = apply(cur, s)
		}
		if cur != tt.final {
			t.Errorf("%v ends as %q, want %q", tt.sequence, cur, tt.final)
		}
	}
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "webhooks", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseWebhookFixtures(t *testing.T) {
	t.Parallel()
	t.Run("text message", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "text_message.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(wh.Messages) != 1 || len(wh.Statuses) != 0 {
			t.Fatalf("got %d messages %d statuses", len(wh.Messages), len(wh.Statuses))
		}
		m := wh.Messages[0]
		want := Inbound{
			PhoneNumberID:  "106540352242922",
			ConversationID: "16505551234",
			MessageID:      "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
			Timestamp:      time.Unix(1749416383, 0).UTC(),
			Type:           "text",
		}
		m.Payload, want.Payload = nil, nil
		if fmt.Sprint(m) != fmt.Sprint(want) {
			t.Errorf("got  %+v\nwant %+v", m, want)
		}
		var p struct {
			Message struct {
				Text struct{ Body string } `json:"text"`
			} `json:"message"`
			Contact struct {
				Profile struct{ Name string } `json:"profile"`
			} `json:"contact"`
			Metadata struct {
				DisplayPhoneNumber string `json:"display_phone_number"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(wh.Messages[0].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Message.Text.Body != "Does it come in another color?" || p.Contact.Profile.Name != "Sheena Nelson" ||
			p.Metadata.DisplayPhoneNumber != "15550783881" {
			t.Errorf("payload lost the original event: %s", wh.Messages[0].Payload)
		}
	})

	t.Run("status sent", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "status_sent.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(wh.Statuses) != 1 || len(wh.Messages) != 0 {
			t.Fatalf("got %d messages %d statuses", len(wh.Messages), len(wh.Statuses))
		}
		s := wh.Statuses[0]
		if s.PhoneNumberID != "106540352242922" || s.MessageID != "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI3N0EyQUJDMjFEQzZCQUMzODMA" ||
			s.Status != "sent" || s.RecipientID != "16505551234" || s.CallbackData != "step-9f1c2e" ||
			!s.Timestamp.Equal(time.Unix(1750263773, 0)) || s.Errors != nil {
			t.Errorf("unexpected status %+v", s)
		}
	})

	t.Run("status failed", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "status_failed.json"))
		if err != nil {
			t.Fatal(err)
		}
		s := wh.Statuses[0]
		if s.Status != "failed" || s.CallbackData != "step-77aa01" {
			t.Errorf("unexpected status %+v", s)
		}
		var errs []struct {
			Code int `json:"code"`
		}
		if err := json.Unmarshal(s.Errors, &errs); err != nil || len(errs) != 1 || errs[0].Code != 131047 {
			t.Errorf("errors not kept: %s (%v)", s.Errors, err)
		}
	})

	t.Run("business-scoped user id", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "bsuid_message.json"))
		if err != nil {
			t.Fatal(err)
		}
		if got := wh.Messages[0].ConversationID; got != "US.13491208655302741918" {
			t.Errorf("ConversationID = %q, want the BSUID", got)
		}
	})

	t.Run("interactive reply", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "interactive_reply.json"))
		if err != nil {
			t.Fatal(err)
		}
		m := wh.Messages[0]
		if m.Type != "interactive" || m.ConversationID != "5215512345678" {
			t.Errorf("unexpected message %+v", m)
		}
		if !strings.Contains(string(m.Payload), `"confirm-order-42"`) {
			t.Errorf("payload lost the button reply: %s", m.Payload)
		}
	})

	t.Run("unknown field skipped", func(t *testing.T) {
		t.Parallel()
		wh, err := ParseWebhook(readFixture(t, "account_update.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(wh.Messages)+len(wh.Statuses) != 0 {
			t.Errorf("an account_update must yield nothing: %+v", wh)
		}
	})
}

// multiWebhook builds 2 entries × 2 changes × 3 messages, each change also
// carrying one status, plus a change of another field in each entry.
func multiWebhook() []byte {
	var entries []string
	for e := range 2 {
		var changes []string
		for c := range 2 {
			phone := fmt.Sprintf("10654035224292%d", e)
			user := fmt.Sprintf("1650555%02d%02d", e, c)
			var msgs []string
			for m := range 3 {
				msgs = append(msgs, fmt.Sprintf(`{"from":%q,"id":"wamid.in-%d-%d-%d","timestamp":"%d","type":"text","text":{"body":"e%d c%d m%d"}}`,
					user, e, c, m, 1750000000+e*100+c*10+m, e, c, m))
			}
			changes = append(changes, fmt.Sprintf(`{"field":"messages","value":{"messaging_product":"whatsapp",
				"metadata":{"display_phone_number":"1555078388%d","phone_number_id":%q},
				"contacts":[{"profile":{"name":"User %d-%d"},"wa_id":%q}],
				"messages":[%s],
				"statuses":[{"id":"wamid.out-%d-%d","status":"delivered","timestamp":"1750000999","recipient_id":%q,"biz_opaque_callback_data":"step-%d-%d",
					"pricing":{"billable":true,"pricing_model":"PMP","category":"utility","type":"regular"}}]}}`,
				e, phone, e, c, user, strings.Join(msgs, ","), e, c, user, e, c))
		}
		changes = append(changes, `{"field":"message_template_status_update","value":{"event":"APPROVED","message_template_id":1}}`)
		entries = append(entries, fmt.Sprintf(`{"id":"10229012934039%d","changes":[%s]}`, e, strings.Join(changes, ",")))
	}
	return []byte(`{"object":"whatsapp_business_account","entry":[` + strings.Join(entries, ",") + `]}`)
}

func TestParseWebhookEveryEntryAndChange(t *testing.T) {
	t.Parallel()
	wh, err := ParseWebhook(multiWebhook())
	if err != nil {
		t.Fatal(err)
	}
	if len(wh.Messages) != 12 || len(wh.Statuses) != 4 {
		t.Fatalf("got %d messages and %d statuses, want 12 and 4", len(wh.Messages), len(wh.Statuses))
	}
	i := 0
	for e := range 2 {
		for c := range 2 {
			for m := range 3 {
				got := wh.Messages[i]
				i++
				if got.MessageID != fmt.Sprintf("wamid.in-%d-%d-%d", e, c, m) ||
					got.ConversationID != fmt.Sprintf("1650555%02d%02d", e, c) ||
					got.PhoneNumberID != fmt.Sprintf("10654035224292%d", e) ||
					got.Timestamp.Unix() != int64(1750000000+e*100+c*10+m) {
					t.Errorf("message %d: %+v", i-1, got)
				}
				if !strings.Contains(string(got.Payload), fmt.Sprintf(`"body":"e%d c%d m%d"`, e, c, m)) ||
					!strings.Contains(string(got.Payload), fmt.Sprintf(`"name":"User %d-%d"`, e, c)) {
					t.Errorf("message %d payload: %s", i-1, got.Payload)
				}
			}
			s := wh.Statuses[e*2+c]
			if s.MessageID != fmt.Sprintf("wamid.out-%d-%d", e, c) || s.CallbackData != fmt.Sprintf("step-%d-%d", e, c) ||
				s.Status != "delivered" || s.PhoneNumberID != fmt.Sprintf("10654035224292%d", e) {
				t.Errorf("status %d: %+v", e*2+c, s)
			}
		}
	}
}

func TestParseWebhookConversationID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		contacts string
		message  string
		want     string
		contact  string // expected payload contact name, "" for none
	}{
		{"from only", `[]`, `{"id":"w1","from":"111"}`, "111", ""},
		{"contact wa_id", `[{"wa_id":"111","profile":{"name":"A"}}]`, `{"id":"w1","from":"111"}`, "111", "A"},
		{"wa_id spelled differently", `[{"wa_id":"5215512345678","profile":{"name":"MX"}}]`, `{"id":"w1","from":"525512345678"}`, "5215512345678", "MX"},
		{"message user_id wins", `[{"wa_id":"111","user_id":"US.1","profile":{"name":"A"}}]`, `{"id":"w1","from":"111","user_id":"US.9"}`, "US.9", "A"},
		{"contact user_id wins over wa_id", `[{"wa_id":"111","user_id":"US.1","profile":{"name":"A"}}]`, `{"id":"w1","from":"111"}`, "US.1", "A"},
		{"matching contact among several", `[{"wa_id":"222","profile":{"name":"B"}},{"wa_id":"111","user_id":"US.1","profile":{"name":"A"}}]`, `{"id":"w1","from":"111"}`, "US.1", "A"},
		{"no match among several", `[{"wa_id":"222"},{"wa_id":"333"}]`, `{"id":"w1","from":"111"}`, "111", ""},
		{"username user without phone", `[{"user_id":"US.7","profile":{"name":"U"}}]`, `{"id":"w1","from_user_id":"US.7"}`, "US.7", "U"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"phone_number_id":"99"},"contacts":%s,"messages":[%s]}}]}]}`,
				tt.contacts, tt.message)
			wh, err := ParseWebhook([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if got := wh.Messages[0].ConversationID; got != tt.want {
				t.Errorf("ConversationID = %q, want %q", got, tt.want)
			}
			var p struct {
				Contact *struct {
					Profile struct{ Name string } `json:"profile"`
				} `json:"contact"`
			}
			_ = json.Unmarshal(wh.Messages[0].Payload, &p)
			name := ""
			if p.Contact != nil {
				name = p.Contact.Profile.Name
			}
			if name != tt.contact {
				t.Errorf("payload contact %q, want %q (%s)", name, tt.contact, wh.Messages[0].Payload)
			}
		})
	}
}

func TestParseWebhookRejects(t *testing.T) {
	t.Parallel()
	wrap := func(value string) string {
		return `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":` + value + `}]}]}`
	}
	long := strings.Repeat("x", MaxIDLength+1)
	tests := []struct {
		name, body, want string
	}{
		{"empty", ``, "JSON object"},
		{"not JSON", `hello`, "JSON object"},
		{"array", `[{"object":"whatsapp_business_account"}]`, "JSON object"},
		{"string", `"whatsapp_business_account"`, "JSON object"},
		{"null", `null`, "JSON object"},
		{"broken JSON", `{"object":`, "parse webhook"},
		{"other object", `{"object":"page","entry":[]}`, `object "page"`},
		{"no object", `{"entry":[]}`, `object ""`},
		{"value not an object", wrap(`"x"`), "entry[0].changes[0]: value"},
		{"message without id", wrap(`{"messages":[{"from":"1","type":"text"}]}`), "messages[0]: id: required"},
		{"message without sender", wrap(`{"messages":[{"id":"w1","type":"text"}]}`), "messages[0]: from: required"},
		{"null message", wrap(`{"messages":[null]}`), "messages[0]: id: required"},
		{"message id too long", wrap(`{"messages":[{"id":"` + long + `","from":"1"}]}`), "id: must be 1 to 256 printable characters, not 257"},
		{"sender too long", wrap(`{"messages":[{"id":"w1","from":"` + long + `"}]}`), "sender id: must be 1 to 256 printable characters, not 257"},
		{"sender with a trailing space", wrap(`{"messages":[{"id":"w1","from":"1 "}]}`), "sender id: must be 1 to 256 printable characters, without a space at either end"},
		{"line separator in id", wrap(`{"messages":[{"id":"w\u2028","from":"1"}]}`), "id: must be 1 to 256 printable characters, without control characters or line separators: U+2028"},
		{"lone surrogate in id", wrap(`{"messages":[{"id":"w\ud800","from":"1"}]}`), "messages[0]: an id is not valid Unicode"},
		{"lone surrogate in sender", wrap(`{"messages":[{"id":"w1","from":"1\udc00"}]}`), "messages[0]: an id is not valid Unicode"},
		{"lone surrogate in status id", wrap(`{"statuses":[{"id":"\ud83dw","status":"sent"}]}`), "statuses[0]: an id is not valid Unicode"},
		{"control character in id", wrap(`{"messages":[{"id":"w\u0000","from":"1"}]}`), "control characters"},
		{"numeric id", wrap(`{"messages":[{"id":12,"from":"1"}]}`), "messages[0]"},
		{"status without id", wrap(`{"statuses":[{"status":"sent"}]}`), "statuses[0]: id: required"},
		{"status without status", wrap(`{"statuses":[{"id":"w1"}]}`), "statuses[0]: status: required"},
		{"status id too long", wrap(`{"statuses":[{"id":"` + long + `","status":"sent"}]}`), "statuses[0]: id: must be 1 to 256 printable characters, not 257"},
		{"phone number id too long", wrap(`{"metadata":{"phone_number_id":"` + long + `"},"messages":[]}`), "phone_number_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseWebhook([]byte(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseWebhook error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseWebhookAcceptsLongestIDs(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("é", MaxIDLength) // 256 characters, 512 bytes
	body := `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"id":"` + id + `","from":"` + id + `"}]}}]}]}`
	wh, err := ParseWebhook([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if wh.Messages[0].MessageID != id || wh.Messages[0].ConversationID != id {
		t.Error("ids of exactly 256 characters must pass unchanged")
	}
}

// An id's escaped surrogate pair is its character; a lone surrogate is
// refused in an id (metaID) but kept in the user's text, which the engine
// makes storable.
func TestParseWebhookSurrogatesInIDsAndText(t *testing.T) {
	t.Parallel()
	body := `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[` +
		`{"id":"w\ud83d\ude00","from":"1","type":"text","text":{"body":"a\ud800b"}}]}}]}]}`
	wh, err := ParseWebhook([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := wh.Messages[0].MessageID; got != "w😀" {
		t.Errorf("message id %q, want w😀", got)
	}
}

func TestParseWebhookEmptyAndTolerant(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"object":"whatsapp_business_account"}`,
		`{"object":"whatsapp_business_account","entry":[]}`,
		`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"statuses":[{"id":"w","status":"sent","timestamp":"soon"}]}}]}]}`,
	} {
		if _, err := ParseWebhook([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "webhooks", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	var seeds [][]byte
	for _, name := range files {
		seeds = append(seeds, readFixture(f, filepath.Base(name)))
	}
	return append(seeds, multiWebhook(),
		[]byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"id":"a","user_id":"b"}]}}]}]}`),
		[]byte(`{}`), []byte(`[]`), []byte(`null`), []byte(``))
}

// FuzzParseWebhook parses any body as a delivery: never a panic; what it
// accepts has ids that pass CheckID, statuses
// with a status, and payloads that are objects holding the message (the
// engine makes their text storable: engine/webhooks.go). Seeds: testdata/webhooks (Meta's shapes),
// the bodies below and testdata/fuzz/FuzzParseWebhook.
func FuzzParseWebhook(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		wh, err := ParseWebhook(body)
		if err != nil {
			return
		}
		okID := func(what, id string) {
			if err := CheckID(id); err != nil {
				t.Fatalf("%s %q accepted: %v", what, id, err)
			}
		}
		for _, m := range wh.Messages {
			okID("message id", m.MessageID)
			okID("conversation id", m.ConversationID)
			if m.PhoneNumberID != "" {
				okID("phone number id", m.PhoneNumberID)
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal(m.Payload, &p); err != nil || p["message"] == nil {
				t.Fatalf("payload %s is not an object with the message: %v", m.Payload, err)
			}
		}
		for _, s := range wh.Statuses {
			okID("status message id", s.MessageID)
			if s.Status == "" {
				t.Fatal("status without status accepted")
			}
		}
	})
}

func FuzzVerifySignature(f *testing.F) {
	for i, s := range fuzzSeeds(f) {
		secret := fmt.Sprintf("secret-%d", i)
		f.Add(secret, s, Sign(secret, s))
		f.Add(secret, s, "sha256=00")
	}
	f.Add("", []byte("x"), "sha256=")
	f.Fuzz(func(t *testing.T, secret string, body []byte, header string) {
		ok := VerifySignature(secret, body, header)
		if ok {
			// Only the genuine digest (in any hex case) may pass.
			want := Sign(secret, body)
			if secret == "" || !strings.EqualFold(strings.TrimSpace(header), want) {
				t.Fatalf("accepted forged header %q for secret %q", header, secret)
			}
		}
		if secret != "" && !VerifySignature(secret, body, Sign(secret, body)) {
			t.Fatal("rejected a genuine signature")
		}
	})
}
