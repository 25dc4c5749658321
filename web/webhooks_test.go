package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// The jobstest tenant's whatsapp credential, as Meta's app knows it.
const (
	waAppSecret   = "app-secret-x"
	waVerifyToken = "verify-x"
)

// waEnv is a running engine behind the real HTTP handler, for webhook tests.
type waEnv struct {
	*jobstest.Bundle
	URL     string
	handler http.Handler
	logs    *waLogs
}

// waLogs collects log lines from many goroutines.
type waLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *waLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *waLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waStart serves web.New(...).Handler() over jobstest.Setup; run starts the
// workers.
func waStart(t testing.TB, o jobstest.Options, cfg web.Config) *waEnv {
	t.Helper()
	logs := &waLogs{}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	b := jobstest.Setup(t, o)
	h := web.New(cfg, b.Engine, b.Tenants, b.Vault, o.Logger).Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &waEnv{Bundle: b, URL: srv.URL, handler: h, logs: logs}
}

// webhookURL is the tenant's callback URL as configured in Meta's app.
func (e *waEnv) webhookURL(tenant string) string { return e.URL + "/webhooks/whatsapp/" + tenant }

// deliver POSTs body as Meta would, with signature as X-Hub-Signature-256
// ("" for none), and returns the status and answer.
func (e *waEnv) deliver(t *testing.T, tenant string, body []byte, signature string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.webhookURL(tenant), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set("X-Hub-Signature-256", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("deliver webhook: %v", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// deliverSigned delivers a genuine webhook of the jobstest tenant and wants 200.
func (e *waEnv) deliverSigned(t *testing.T, body []byte) waAnswer {
	t.Helper()
	status, answer := e.deliver(t, "acme", body, whatsapp.Sign(waAppSecret, body))
	if status != http.StatusOK {
		t.Fatalf("webhook answered %d %s; want 200", status, answer)
	}
	var a waAnswer
	if err := json.Unmarshal([]byte(answer), &a); err != nil {
		t.Fatalf("webhook answer %q: %v", answer, err)
	}
	return a
}

type waAnswer struct {
	Accepted, Duplicates, Statuses int
}

// Webhook payloads in Meta's shape.
type (
	waMsg struct {
		From, UserID, ID, Text string
		// At is the message's WhatsApp timestamp; zero: now (a user who
		// just wrote, inside the service window).
		At time.Time
	}
	waStatus struct {
		ID, Status, CallbackData, Recipient string
	}
	waChange struct {
		Phone    string
		Messages []waMsg
		Statuses []waStatus
	}
)

// waPayload builds a webhook with one entry per element of entries.
func waPayload(entries ...[]waChange) []byte {
	var es []map[string]any
	for i, changes := range entries {
		var cs []map[string]any
		for _, c := range changes {
			value := map[string]any{
				"messaging_product": "whatsapp",
				"metadata":          map[string]string{"display_phone_number": "15550001111", "phone_number_id": c.Phone},
			}
			var contacts, msgs, statuses []map[string]any
			for _, m := range c.Messages {
				contact := map[string]any{"profile": map[string]string{"name": "User " + m.From}, "wa_id": m.From}
				at := m.At
				if at.IsZero() {
					at = time.Now()
				}
				msg := map[string]any{"from": m.From, "id": m.ID, "timestamp": strconv.FormatInt(at.Unix(), 10), "type": "text",
					"text": map[string]string{"body": m.Text}}
				if m.UserID != "" {
					contact["user_id"], msg["user_id"] = m.UserID, m.UserID
				}
				contacts = append(contacts, contact)
				msgs = append(msgs, msg)
			}
			for _, s := range c.Statuses {
				st := map[string]any{"id": s.ID, "status": s.Status, "timestamp": "1750263773", "recipient_id": s.Recipient}
				if s.CallbackData != "" {
					st["biz_opaque_callback_data"] = s.CallbackData
				}
				statuses = append(statuses, st)
			}
			if len(msgs) > 0 {
				value["contacts"], value["messages"] = contacts, msgs
			}
			if len(statuses) > 0 {
				value["statuses"] = statuses
			}
			cs = append(cs, map[string]any{"field": "messages", "value": value})
		}
		es = append(es, map[string]any{"id": "WABA" + strconv.Itoa(i), "changes": cs})
	}
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": es})
	return body
}

// statusWebhook is Meta telling the tenant that a sent message reached status.
func statusWebhook(s whatsapptest.Send, status string) []byte {
	return waPayload([]waChange{{Phone: s.PhoneNumberID, Statuses: []waStatus{{ID: s.WAMID, Status: status, CallbackData: s.CallbackData, Recipient: s.To}}}})
}

func oneMessage(phone, from, id string) []byte {
	return waPayload([]waChange{{Phone: phone, Messages: []waMsg{{From: from, ID: id, Text: "hello"}}}})
}

// Meta's subscription check: the challenge comes back only for the tenant's
// verify token and mode subscribe.
func TestWhatsAppHandshake(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	if _, err := e.Tenants.Create(context.Background(), tenants.CreateParams{Slug: "bare"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, tenant, mode, token string
		status                    int
	}{
		{"genuine", "acme", "subscribe", waVerifyToken, http.StatusOK},
		{"wrong token", "acme", "subscribe", "verify-y", http.StatusForbidden},
		{"no token", "acme", "subscribe", "", http.StatusForbidden},
		{"wrong mode", "acme", "unsubscribe", waVerifyToken, http.StatusForbidden},
		// Refused like a wrong token: the endpoint does not tell which
		// slugs exist.
		{"unknown tenant", "nobody", "subscribe", waVerifyToken, http.StatusForbidden},
		{"tenant without whatsapp credential", "bare", "subscribe", waVerifyToken, http.StatusForbidden},
		{"malformed slug", "No%20Body", "subscribe", waVerifyToken, http.StatusForbidden},
	}
	for _, c := range cases {
		q := url.Values{"hub.mode": {c.mode}, "hub.verify_token": {c.token}, "hub.challenge": {"1158201444"}}
		resp, err := http.Get(e.webhookURL(c.tenant) + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
			continue
		}
		if c.status == http.StatusOK && (string(body) != "1158201444" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain")) {
			t.Errorf("%s: answered %q as %s; want the bare challenge as text/plain", c.name, body, resp.Header.Get("Content-Type"))
		}
		if c.status != http.StatusOK && strings.Contains(string(body), "1158201444") {
			t.Errorf("%s: the challenge was echoed on a refusal", c.name)
		}
	}
}

// Only a body signed with the tenant's app secret is read; everything else
// is refused with a clear 4xx and stores nothing.
func TestWhatsAppWebhookRefusals(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{MaxWebhookBytes: 64 << 10})
	ctx := context.Background()
	other, err := e.Tenants.Create(ctx, tenants.CreateParams{Slug: "other"})
	if err != nil {
		t.Fatal(err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": "2000002", "access_token": "t2", "app_secret": "other-secret", "verify_token": "v2"})
	if err := e.Vault.Put(ctx, e.Pool, other.Tenant.ID, "whatsapp", cred); err != nil {
		t.Fatal(err)
	}
	body := oneMessage(jobstest.PhoneNumberID, "16505551234", "wamid.A1")
	huge := waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "1", ID: "wamid.big", Text: strings.Repeat("x", 70<<10)}}}})
	malformed := []byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"from":"1"}]}}]}]}`)
	foreign := oneMessage("9999999", "16505551234", "wamid.A2")
	notUTF8 := bytes.Replace(body, []byte("hello"), []byte("\xff\xfe"), 1)
	mixed := waPayload([]waChange{
		{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "16505551234", ID: "wamid.A3"}}},
		{Phone: "9999999", Messages: []waMsg{{From: "16505551234", ID: "wamid.A4"}}},
	})
	cases := []struct {
		name, tenant string
		body         []byte
		signature    string
		status       int
		code         string
	}{
		{"missing signature", "acme", body, "", 401, "unauthorized"},
		{"signed with another secret", "acme", body, whatsapp.Sign("not-the-secret", body), 401, "unauthorized"},
		{"signed by another tenant's app", "acme", body, whatsapp.Sign("other-secret", body), 401, "unauthorized"},
		{"signature of another body", "acme", body, whatsapp.Sign(waAppSecret, foreign), 401, "unauthorized"},
		{"sha1 signature", "acme", body, "sha1=" + strings.TrimPrefix(whatsapp.Sign(waAppSecret, body), "sha256=")[:40], 401, "unauthorized"},
		{"unknown tenant", "nobody", body, whatsapp.Sign(waAppSecret, body), 401, "unauthorized"},
		{"over the size limit", "acme", huge, whatsapp.Sign(waAppSecret, huge), 413, "payload_too_large"},
		{"signed but not JSON", "acme", []byte("not json"), whatsapp.Sign(waAppSecret, []byte("not json")), 400, "invalid_request"},
		{"signed but a message without id", "acme", malformed, whatsapp.Sign(waAppSecret, malformed), 400, "invalid_request"},
		{"signed but not UTF-8", "acme", notUTF8, whatsapp.Sign(waAppSecret, notUTF8), 400, "invalid_request"},
		{"another business number", "acme", foreign, whatsapp.Sign(waAppSecret, foreign), 400, "invalid_request"},
		{"one change of another number", "acme", mixed, whatsapp.Sign(waAppSecret, mixed), 400, "invalid_request"},
		{"acme's number at other's endpoint", "other", body, whatsapp.Sign("other-secret", body), 400, "invalid_request"},
	}
	for _, c := range cases {
		status, answer := e.deliver(t, c.tenant, c.body, c.signature)
		var a struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal([]byte(answer), &a)
		if status != c.status || a.Error.Code != c.code || a.Error.Message == "" {
			t.Errorf("%s: %d %s; want %d %s with a message", c.name, status, answer, c.status, c.code)
		}
		if strings.Contains(answer, waAppSecret) || strings.Contains(answer, "other-secret") {
			t.Errorf("%s: the answer shows an app secret", c.name)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`) + e.Count(`SELECT count(*) FROM ordo.conversations`); n != 0 {
		t.Fatalf("refused webhooks stored %d rows", n)
	}
	if strings.Contains(e.logs.String(), waAppSecret) {
		t.Fatal("the logs show the app secret")
	}
	// The same body, genuinely signed, goes in; so does a user's text with a
	// NUL, which Postgres cannot store, as U+FFFD.
	if a := e.deliverSigned(t, body); a.Accepted != 1 {
		t.Fatalf("genuine webhook: %+v", a)
	}
	nul := bytes.Replace(oneMessage(jobstest.PhoneNumberID, "16505551234", "wamid.NUL"), []byte("hello"), []byte(`a\u0000b`), 1)
	if a := e.deliverSigned(t, nul); a.Accepted != 1 {
		t.Fatalf("webhook with a NUL: %+v", a)
	}
	if m, err := e.Engine.Message(ctx, e.Tenant.ID, "wamid.NUL"); err != nil || !strings.Contains(string(m.Payload), `"a\ufffdb"`) && !strings.Contains(string(m.Payload), "a\uFFFDb") {
		t.Fatalf("message with a NUL stored as %s, %v", m.Payload, err)
	}
}

// One delivery with 2 entries × 2 changes × 3 messages and statuses: every
// message is accepted as an inbound message of its user's conversation, in
// the order Meta listed it, and every status finds its send step (by the
// step id ordo put in biz_opaque_callback_data, or by wamid) without ever
// regressing it; statuses for unknown or other tenants' steps change nothing.
func TestWhatsAppWebhookEveryEntryChangeMessageAndStatus(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{}, web.Config{})
	ctx := context.Background()

	// Two replies go out first, so there are send steps to report on.
	e.Ingest("16505550001", "out-1", "first")
	e.Ingest("16505550002", "out-2", "second")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(wctx, 2); err != nil {
		t.Fatal(err)
	}
	sent := e.WhatsApp.Sends()
	byText := map[string]whatsapptest.Send{sent[0].Text: sent[0], sent[1].Text: sent[1]}
	first, second := byText["first"], byText["second"]
	e.WaitFor("both sends recorded", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.steps WHERE status = 'done' AND provider_message_id IS NOT NULL`) == 2
	})

	users := []waMsg{{From: "16505550001"}, {From: "16505550002"}, {From: "16505550003", UserID: "US.13491208655302741918"}, {From: "16505550004"}}
	var changes [2][2]waChange
	var want []waMsg
	n := 0
	for i := range 2 {
		for j := range 2 {
			c := waChange{Phone: jobstest.PhoneNumberID}
			for k := range 3 {
				u := users[(i*2+j+k)%len(users)]
				n++
				m := waMsg{From: u.From, UserID: u.UserID, ID: fmt.Sprintf("wamid.in-%02d", n), Text: fmt.Sprintf("text %d", n)}
				c.Messages = append(c.Messages, m)
				want = append(want, m)
			}
			changes[i][j] = c
		}
	}
	changes[1][0].Statuses = []waStatus{
		{ID: first.WAMID, Status: "delivered", CallbackData: first.CallbackData, Recipient: first.To},
		{ID: second.WAMID, Status: "read", Recipient: second.To}, // no callback data: found by wamid
		{ID: "wamid.unknown", Status: "read", CallbackData: "987654321", Recipient: "1"},
		{ID: "wamid.unknown2", Status: "delivered", Recipient: "1"},
	}
	changes[1][1].Statuses = []waStatus{{ID: first.WAMID, Status: "sent", CallbackData: first.CallbackData, Recipient: first.To}}
	body := waPayload(changes[0][:], changes[1][:])

	began := time.Now()
	a := e.deliverSigned(t, body)
	t.Logf("12 messages and 5 statuses committed and answered in %s", time.Since(began))
	if a.Accepted != 12 || a.Duplicates != 0 || a.Statuses != 2 {
		t.Fatalf("answer %+v; want 12 accepted, 2 statuses applied", a)
	}
	lastSeq := map[string]int64{}
	for _, m := range want {
		got, err := e.Engine.Message(ctx, e.Tenant.ID, m.ID)
		if err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
		conv := m.From
		if m.UserID != "" {
			conv = m.UserID // Meta's business-scoped user id wins over the phone number
		}
		var p struct {
			Message struct {
				Text struct{ Body string }
			}
			Metadata struct {
				PhoneNumberID string `json:"phone_number_id"`
			}
		}
		_ = json.Unmarshal(got.Payload, &p)
		if got.Direction != "inbound" || got.ConversationID != conv || p.Message.Text.Body != m.Text || p.Metadata.PhoneNumberID != jobstest.PhoneNumberID {
			t.Errorf("%s stored as %s in %q with payload %s", m.ID, got.Direction, got.ConversationID, got.Payload)
		}
		if got.Seq <= lastSeq[conv] {
			t.Errorf("%s has seq %d after seq %d of its conversation: Meta's order lost", m.ID, got.Seq, lastSeq[conv])
		}
		lastSeq[conv] = got.Seq
	}

	status := func(s whatsapptest.Send) (string, string) {
		var st, id string
		if err := e.Pool.QueryRow(ctx, `SELECT provider_status, provider_message_id FROM ordo.steps WHERE id = $1`, s.CallbackData).Scan(&st, &id); err != nil {
			t.Fatal(err)
		}
		return st, id
	}
	if st, id := status(first); st != "delivered" || id != first.WAMID {
		t.Fatalf("first reply: %s %s; want delivered (sent came later and must not regress it)", st, id)
	}
	if st, _ := status(second); st != "read" {
		t.Fatalf("second reply: %s; want read", st)
	}
	// Later deliveries: read moves on, delivered after read does not.
	e.deliverSigned(t, statusWebhook(first, "read"))
	if a := e.deliverSigned(t, statusWebhook(first, "delivered")); a.Statuses != 0 {
		t.Fatalf("delivered after read applied: %+v", a)
	}
	if st, _ := status(first); st != "read" {
		t.Fatalf("first reply: %s after read then delivered; want read", st)
	}
	// A redelivery of the whole webhook is all duplicates and changes nothing.
	if a := e.deliverSigned(t, body); a.Accepted != 0 || a.Duplicates != 12 || a.Statuses != 0 {
		t.Fatalf("redelivery: %+v; want 12 duplicates, no status applied", a)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE direction = 'inbound'`); n != 12 {
		t.Fatalf("%d inbound messages, want 12", n)
	}
}

// A status naming another tenant's step (by step id or by wamid) does not
// touch it, and one for a step nobody has is ignored: both answer 200, since
// Meta would otherwise redeliver them for days.
func TestWhatsAppStatusForOtherTenantOrUnknownStep(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{}, web.Config{})
	ctx := context.Background()
	other, err := e.Tenants.Create(ctx, tenants.CreateParams{Slug: "other"})
	if err != nil {
		t.Fatal(err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": "2000002", "access_token": "t2", "app_secret": "other-secret", "verify_token": "v2"})
	if err := e.Vault.Put(ctx, e.Pool, other.Tenant.ID, "whatsapp", cred); err != nil {
		t.Fatal(err)
	}
	e.Ingest("16505550001", "out-1", "first")
	e.WaitFor("the send to be recorded", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.steps WHERE status = 'done' AND provider_message_id IS NOT NULL`) == 1
	})
	s := e.WhatsApp.Sends()[0]

	forged := waPayload([]waChange{{Phone: "2000002", Statuses: []waStatus{{ID: s.WAMID, Status: "read", CallbackData: s.CallbackData, Recipient: s.To}}}})
	status, answer := e.deliver(t, "other", forged, whatsapp.Sign("other-secret", forged))
	if status != http.StatusOK || !strings.Contains(answer, `"statuses":0`) {
		t.Fatalf("other tenant's status for acme's step: %d %s; want 200 with nothing applied", status, answer)
	}
	unknown := waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Statuses: []waStatus{
		{ID: "wamid.nobody", Status: "read", CallbackData: "424242", Recipient: "1"},
		{ID: "wamid.nobody2", Status: "failed", CallbackData: "not-a-step-id", Recipient: "1"},
	}}})
	if a := e.deliverSigned(t, unknown); a.Statuses != 0 {
		t.Fatalf("unknown steps: %+v", a)
	}
	var st *string
	if err := e.Pool.QueryRow(ctx, `SELECT provider_status FROM ordo.steps WHERE id = $1`, s.CallbackData).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != nil {
		t.Fatalf("acme's step has status %q from another tenant's webhook", *st)
	}
}

// Meta delivers the same webhook several times at once: every message is
// accepted exactly once, every conversation's seqs stay dense and ordered,
// and every delivery gets 200.
func TestWhatsAppSameWebhookFiveTimesConcurrently(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	var changes []waChange
	for c := range 2 {
		ch := waChange{Phone: jobstest.PhoneNumberID}
		for k := range 6 {
			ch.Messages = append(ch.Messages, waMsg{From: fmt.Sprintf("1650555000%d", (c+k)%3), ID: fmt.Sprintf("wamid.c%d-%d", c, k), Text: "hi"})
		}
		changes = append(changes, ch)
	}
	body := waPayload(changes)
	sig := whatsapp.Sign(waAppSecret, body)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []waAnswer
	)
	start := make(chan struct{})
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			status, answer := e.deliver(t, "acme", body, sig)
			var a waAnswer
			if err := json.Unmarshal([]byte(answer), &a); status != http.StatusOK || err != nil {
				t.Errorf("delivery answered %d %s", status, answer)
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	accepted, dupes := 0, 0
	for _, a := range answers {
		accepted += a.Accepted
		dupes += a.Duplicates
	}
	if accepted != 12 || dupes != 48 {
		t.Fatalf("answers %+v: %d accepted, %d duplicates; want 12 and 48", answers, accepted, dupes)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 12 {
		t.Fatalf("%d messages stored, want 12", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.conversations c WHERE c.last_seq <> (SELECT count(*) FROM ordo.messages m WHERE m.conversation_pk = c.id)`); n != 0 {
		t.Fatalf("%d conversations have gaps in their seqs", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.ready`); n != 3 {
		t.Fatalf("%d ready conversations for 3 conversations", n)
	}
}

// Status webhooks through the real endpoint settle an ambiguous send: the
// fake Cloud API takes the message and drops the connection, the drain marks
// the step unknown and waits (policy reconcile), Meta's "sent" status for the
// step arrives, and the step is done without a resend; the next message of
// the conversation follows.
func TestAmbiguousSendSettledByStatusWebhook(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true, Config: waJobsConfig(10 * time.Second)}, web.Config{})
	e.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.Text == "lost answer" && attempt == 1 {
			return whatsapptest.Response{DropAfterRead: true, Record: true}
		}
		return whatsapptest.Default(req, attempt)
	})
	e.Start()
	started := time.Now()
	e.Ingest("16505550001", "m1", "lost answer")
	e.Ingest("16505550001", "m2", "after")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the step to be unknown", 5*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.steps WHERE status = 'unknown'`) == 1
	})
	e.deliverSigned(t, statusWebhook(e.WhatsApp.Sends()[0], "sent"))
	if err := e.WhatsApp.WaitForSends(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(started); elapsed > 8*time.Second {
		t.Fatalf("settled after %s: the status webhook did not settle it (ReconcileWait is 10s)", elapsed)
	}
	time.Sleep(200 * time.Millisecond)
	if got := texts(e.WhatsApp.Sends()); fmt.Sprint(got) != "[lost answer after]" {
		t.Fatalf("provider saw %v; want the ambiguous message once, then the next", got)
	}
	m, err := e.Engine.Message(context.Background(), e.Tenant.ID, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Steps[0]; m.Status != "done" || s.Attempts != 1 || s.AmbiguousCount != 1 || s.ProviderMessageID != e.WhatsApp.Sends()[0].WAMID || s.ProviderStatus != "sent" {
		t.Fatalf("m1 = %s with step %+v; want done after 1 attempt, 1 ambiguous, the sent wamid", m.Status, s)
	}
}

// waJobsConfig is a worker config for webhook tests: a send timeout short
// enough for timeouts to happen in test time.
func waJobsConfig(reconcileWait time.Duration) jobs.Config {
	return jobs.Config{ReconcileWait: reconcileWait, SendTimeout: 500 * time.Millisecond, HandlerTimeout: 500 * time.Millisecond, PausedRecheck: time.Minute}
}

func texts(sends []whatsapptest.Send) []string {
	out := make([]string, len(sends))
	for i, s := range sends {
		out[i] = s.Text
	}
	return out
}

// Fuzz the webhook endpoint as Meta's side of the wire: any body, signed or
// not. Unsigned bodies are always 401; signed ones are 200 or 400 (never
// 5xx), and a 200 stores exactly the messages the body carries. The seed
// corpus is real payload shapes (plain `go test` runs it); `make fuzz`
// explores further.
func FuzzWhatsAppWebhook(f *testing.F) {
	for _, s := range waFuzzSeeds(f) {
		f.Add(s, true)
		f.Add(s, false)
	}
	e := waStart(f, jobstest.Options{NoStart: true}, web.Config{MaxWebhookBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/whatsapp/acme", bytes.NewReader(body))
		if signed {
			req.Header.Set("X-Hub-Signature-256", whatsapp.Sign(waAppSecret, body))
		}
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		switch {
		case !signed && rec.Code != http.StatusUnauthorized:
			t.Fatalf("unsigned body answered %d %s", rec.Code, rec.Body)
		case signed && rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest:
			t.Fatalf("signed body answered %d %s; want 200 or 400", rec.Code, rec.Body)
		case rec.Code != http.StatusOK:
			return
		}
		wh, err := whatsapp.ParseWebhook(body)
		if err != nil {
			t.Fatalf("200 for a body the parser refuses: %v", err)
		}
		ids := map[string]bool{}
		for _, m := range wh.Messages {
			ids[m.MessageID] = true
		}
		var list []string
		for id := range ids {
			list = append(list, id)
		}
		var stored int
		if err := e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ordo.messages WHERE message_id = ANY($1)`, list).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != len(ids) {
			t.Fatalf("200 for %d messages, %d stored", len(ids), stored)
		}
	})
}

// waFuzzSeeds are the whatsapp package's real payloads, re-addressed to the
// test tenant's number, plus the shapes the tests above build.
func waFuzzSeeds(f *testing.F) [][]byte {
	files, _ := filepath.Glob("../jobs/whatsapp/testdata/webhooks/*.json")
	var seeds [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, bytes.ReplaceAll(b, []byte("106540352242922"), []byte(jobstest.PhoneNumberID)))
	}
	return append(seeds,
		oneMessage(jobstest.PhoneNumberID, "16505551234", "wamid.F1"),
		waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "1", ID: "wamid.F2"}, {From: "2", UserID: "US.1", ID: "wamid.F3"}},
			Statuses: []waStatus{{ID: "wamid.S1", Status: "read", CallbackData: "1"}}}}),
		oneMessage("9999999", "1", "wamid.F4"),
		// Text Postgres cannot hold as is: a NUL escape, a lone surrogate,
		// bytes that are not UTF-8, and a NUL in a status.
		bytes.Replace(oneMessage(jobstest.PhoneNumberID, "1", "wamid.F5"), []byte("hello"), []byte(`nul \u0000 here \\u0000 \ud800`), 1),
		bytes.Replace(oneMessage(jobstest.PhoneNumberID, "1", "wamid.F6"), []byte("hello"), []byte("\xff\xfe"), 1),
		waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Statuses: []waStatus{{ID: "wamid.S2", Status: "read\u0000", CallbackData: "1"}}}}),
		[]byte(`{"object":"whatsapp_business_account","entry":[]}`),
		[]byte(`{}`),
	)
}

// Meta redelivering a message with something changed (here its text) is
// still a duplicate: a webhook delivery is never refused for a reused id
// (Meta would retry it for days, holding back the delivery's other
// messages), unlike a REST repeat with another body.
func TestWhatsAppRedeliveryWithAnotherBodyIsADuplicate(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	first := waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "16505550001", ID: "wamid.same", Text: "hi"}}}})
	if a := e.deliverSigned(t, first); a.Accepted != 1 {
		t.Fatalf("first delivery: %+v", a)
	}
	again := waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{
		{From: "16505550001", ID: "wamid.same", Text: "hi, edited"},
		{From: "16505550001", ID: "wamid.next", Text: "next"},
	}}})
	if a := e.deliverSigned(t, again); a.Accepted != 1 || a.Duplicates != 1 {
		t.Fatalf("redelivery with another body: %+v, want 1 accepted and 1 duplicate", a)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE payload::text LIKE '%edited%'`); n != 0 {
		t.Error("the redelivery's other body replaced the original")
	}
}
