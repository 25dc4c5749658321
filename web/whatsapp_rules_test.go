package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// WhatsApp's own rules (issue 26) over the real HTTP handler.

// apiCall makes one REST call with key and returns the status and body.
func apiCall(t *testing.T, method, url, key string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Every answer is checked against web/openapi.json.
	resp, err := contractClient(t, http.DefaultClient).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, got
}

// errorCode is an error answer's {"error":{"code"}}.
func errorCode(t *testing.T, body []byte) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error answer %q: %v", body, err)
	}
	return e.Error.Code, e.Error.Message
}

func textTo(id, conv string) map[string]any {
	return map[string]any{"message_id": id, "conversation_id": conv, "type": "text", "text": map[string]string{"body": "hello"}}
}

func templateTo(id, conv string) map[string]any {
	return map[string]any{"message_id": id, "conversation_id": conv, "type": "template",
		"template": map[string]any{"name": "hello_world", "language": map[string]string{"code": "en_US"}}}
}

// A non-template message more than 24 h after the user's last message (as
// the webhook stamped it) is refused with 422 outside_service_window and
// nothing stored; a template passes; a fresh inbound message opens the
// window again; a user ordo never heard from is Meta's to judge.
func TestServiceWindow(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	const userA, userB = "16505550101", "16505550102"
	stamped := time.Now().Add(-25 * time.Hour).Truncate(time.Second)
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: userA, ID: "wamid.old", Text: "hi", At: stamped}}}}))

	status, body := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, textTo("late-1", userA))
	if code, msg := errorCode(t, body); status != http.StatusUnprocessableEntity || code != "outside_service_window" {
		t.Fatalf("text 25 h after the user wrote: %d %s; want 422 outside_service_window", status, body)
	} else if closed := stamped.Add(24 * time.Hour).UTC().Format(time.RFC3339); !strings.Contains(msg, closed) {
		t.Errorf("message %q does not say the window closed at %s", msg, closed)
	}
	if status, body := apiCall(t, http.MethodGet, e.URL+"/v1/messages/late-1", e.APIKey, nil); status != http.StatusNotFound {
		t.Errorf("refused message readable: %d %s; want 404 (nothing stored)", status, body)
	}
	if status, body := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, templateTo("tpl-1", userA)); status != http.StatusAccepted {
		t.Errorf("template 25 h after: %d %s; want 202", status, body)
	}
	if status, body := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, textTo("never-1", userB)); status != http.StatusAccepted {
		t.Errorf("text to a user never heard from: %d %s; want 202", status, body)
	}

	// The conversation shows when its window closed.
	_, body = apiCall(t, http.MethodGet, e.URL+"/v1/conversations/"+userA, e.APIKey, nil)
	var conv engine.Conversation
	if err := json.Unmarshal(body, &conv); err != nil || conv.ServiceWindowEndsAt == nil || !conv.ServiceWindowEndsAt.Equal(stamped.Add(24*time.Hour)) {
		t.Errorf("conversation %s: service_window_ends_at want %s", body, stamped.Add(24*time.Hour))
	}

	// The user writes again: the window is open for 24 h from now.
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: userA, ID: "wamid.new", Text: "again"}}}}))
	if status, body := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, textTo("late-2", userA)); status != http.StatusAccepted {
		t.Errorf("text after the user wrote again: %d %s; want 202", status, body)
	}
	// An older message delivered late does not close it again.
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: userA, ID: "wamid.older", Text: "x", At: stamped.Add(-time.Hour)}}}}))
	if status, body := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, textTo("late-3", userA)); status != http.StatusAccepted {
		t.Errorf("text after a late old delivery: %d %s; want 202", status, body)
	}

	// Other applications' SQL gets the same refusal as its own SQLSTATE.
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "16505550103", ID: "wamid.c", Text: "x", At: stamped}}}}))
	_, err := e.Pool.Exec(context.Background(), `SELECT * FROM ordo.enqueue_message('acme', '16505550103', 'sql-1', 'outbound', '{"type":"text","text":{"body":"x"}}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != ordosql.SQLStateOutsideServiceWindow || !strings.Contains(pgErr.Message, "outside the 24-hour customer service window") {
		t.Errorf("SQL enqueue outside the window: %v; want SQLSTATE %s", err, ordosql.SQLStateOutsideServiceWindow)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id IN ('late-1', 'sql-1')`); n != 0 {
		t.Errorf("%d refused messages stored", n)
	}
}

// A handler reply sent after the window closed is a dead letter with the
// window's reason, not a send Meta refuses.
func TestServiceWindowDeadLettersAReply(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"too late"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := waStart(t, jobstest.Options{HandlerURL: handler.URL}, web.Config{})
	// Meta redelivers for days: a message the user wrote 2 days ago,
	// delivered only now, gets a reply outside the window.
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "16505550201", ID: "wamid.w1", Text: "x", At: time.Now().Add(-48 * time.Hour)}}}}))
	e.WaitFor("the reply dead-lettered", 20*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk
			WHERE m.message_id = 'wamid.w1' AND d.reason LIKE '%outside the 24-hour customer service window%'`) == 1
	})
	if n := len(e.WhatsApp.SendsTo("16505550201")); n != 0 {
		t.Errorf("%d sends to the user; want none", n)
	}
}

// With --mark-read, Meta receives one read receipt with a typing indicator
// for the inbound wamid before the reply of a handler that takes 2 s; a
// failing read receipt never holds the reply back.
func TestMarkReadBeforeReplies(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(2 * time.Second)
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"thought about it"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := waStart(t, jobstest.Options{HandlerURL: handler.URL, Config: jobs.Config{HandlerTimeout: 20 * time.Second}}, web.Config{})
	on := true
	if _, err := e.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{MarkRead: &on}); err != nil {
		t.Fatal(err)
	}
	const user = "16505550301"
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: user, ID: "wamid.R1", Text: "slow question"}}}}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(ctx, 1); err != nil {
		t.Fatalf("%v\n%s", err, e.logs)
	}
	// The drain has finished the message; anything repeated would show now.
	e.WaitFor("message done", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'wamid.R1' AND status = 'done'`) == 1
	})
	reads, sends := e.WhatsApp.Reads(), e.WhatsApp.SendsTo(user)
	if len(reads) != 1 || len(sends) != 1 {
		t.Fatalf("%d read receipts and %d sends; want 1 and 1", len(reads), len(sends))
	}
	var body map[string]any
	_ = json.Unmarshal(reads[0].Body, &body)
	ti, _ := body["typing_indicator"].(map[string]any)
	if reads[0].MessageID != "wamid.R1" || body["status"] != "read" || body["messaging_product"] != "whatsapp" || ti["type"] != "text" ||
		reads[0].PhoneNumberID != jobstest.PhoneNumberID || reads[0].Token != jobstest.AccessToken {
		t.Errorf("read receipt %s to %s; want read + typing for wamid.R1 on the tenant's number and token", reads[0].Body, reads[0].PhoneNumberID)
	}
	if !reads[0].At.Before(sends[0].At) || sends[0].At.Sub(reads[0].At) < 1500*time.Millisecond {
		t.Errorf("read receipt at %s, reply at %s; want the receipt first, while the handler worked", reads[0].At, sends[0].At)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times", n)
	}

	// A tenant without mark_read sends none; an outbound message none.
	off := false
	if _, err := e.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{MarkRead: &off}); err != nil {
		t.Fatal(err)
	}
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: user, ID: "wamid.R2", Text: "again"}}}}))
	if err := e.WhatsApp.WaitForSends(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n := len(e.WhatsApp.Reads()); n != 1 {
		t.Errorf("%d read receipts after a message with mark_read off; want still 1", n)
	}
}

// A read receipt Meta refuses is recorded failed; the reply goes out.
func TestMarkReadFailureDoesNotBlockTheReply(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"ok"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := waStart(t, jobstest.Options{HandlerURL: handler.URL}, web.Config{})
	e.WhatsApp.FailReads(http.StatusInternalServerError)
	on := true
	if _, err := e.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{MarkRead: &on}); err != nil {
		t.Fatal(err)
	}
	e.deliverSigned(t, waPayload([]waChange{{Phone: jobstest.PhoneNumberID, Messages: []waMsg{{From: "16505550401", ID: "wamid.F1", Text: "x"}}}}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("read receipt recorded failed", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'wamid.F1' AND read_receipt = 'failed'`) == 1
	})
}

// priced is a status webhook for wamid with Meta's pricing object.
func priced(wamid, status, category string, billable bool) map[string]any {
	return map[string]any{"id": wamid, "status": status, "timestamp": strconv.FormatInt(time.Now().Unix(), 10), "recipient_id": "16505550501",
		"pricing": map[string]any{"billable": billable, "pricing_model": "PMP", "category": category}}
}

func statusesWebhook(statuses ...map[string]any) []byte {
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{"id": "WABA", "changes": []any{
		map[string]any{"field": "messages", "value": map[string]any{"messaging_product": "whatsapp",
			"metadata": map[string]string{"phone_number_id": jobstest.PhoneNumberID}, "statuses": statuses}}}}}})
	return body
}

// The pricing of 3 sent messages' statuses (sent and delivered each) counts
// each message once: utility billable 2, service non-billable 1; the
// period is validated and another tenant sees none of it.
func TestUsage(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	reg, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The delivery through an engine with metrics, the same as the web
	// layer's call.
	eng := engine.New(e.Pool, nil, engine.WithMetrics(reg))
	wh, err := whatsapp.ParseWebhook(statusesWebhook(
		priced("wamid.U1", "sent", "utility", true), priced("wamid.U2", "sent", "utility", true), priced("wamid.S1", "sent", "service", false)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.StoreWebhook(context.Background(), engine.WebhookTenant{ID: e.Tenant.ID, Slug: "acme", PhoneNumberID: jobstest.PhoneNumberID}, wh); err != nil {
		t.Fatal(err)
	}
	e.deliverSigned(t, statusesWebhook(
		priced("wamid.U1", "delivered", "utility", true), priced("wamid.U2", "delivered", "utility", true), priced("wamid.S1", "delivered", "service", false)))
	e.deliverSigned(t, statusesWebhook(priced("wamid.U1", "delivered", "utility", true))) // Meta's redelivery

	status, body := apiCall(t, http.MethodGet, e.URL+"/v1/usage", e.APIKey, nil)
	var u engine.Usage
	if err := json.Unmarshal(body, &u); status != http.StatusOK || err != nil {
		t.Fatalf("usage: %d %s", status, body)
	}
	want := map[string]engine.UsageCategory{"utility": {Billable: 2}, "service": {NonBillable: 1}}
	if len(u.Categories) != 2 || u.Categories["utility"] != want["utility"] || u.Categories["service"] != want["service"] {
		t.Errorf("usage %s; want utility billable 2, service non_billable 1", body)
	}
	if !u.Since.Before(time.Now()) || !u.Until.After(time.Now()) {
		t.Errorf("default period %s..%s does not include now", u.Since, u.Until)
	}
	// A period before the messages: none.
	_, body = apiCall(t, http.MethodGet, e.URL+"/v1/usage?since=2020-01-01T00:00:00Z&until=2020-02-01T00:00:00Z", e.APIKey, nil)
	u = engine.Usage{}
	if err := json.Unmarshal(body, &u); err != nil || len(u.Categories) != 0 {
		t.Errorf("usage of 2020: %s; want no categories", body)
	}
	for _, q := range []string{"since=yesterday", "until=2026-13-01T00:00:00Z", "since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z"} {
		status, body := apiCall(t, http.MethodGet, e.URL+"/v1/usage?"+q, e.APIKey, nil)
		if code, _ := errorCode(t, body); status != http.StatusBadRequest || code != "invalid_request" {
			t.Errorf("usage?%s: %d %s; want 400 invalid_request", q, status, body)
		}
	}
	other, err := e.Tenants.Create(context.Background(), tenants.CreateParams{Slug: "other"})
	if err != nil {
		t.Fatal(err)
	}
	_, body = apiCall(t, http.MethodGet, e.URL+"/v1/usage", other.APIKey, nil)
	u = engine.Usage{}
	if err := json.Unmarshal(body, &u); err != nil || len(u.Categories) != 0 {
		t.Errorf("another tenant's usage: %s; want none", body)
	}
	if status, _ := apiCall(t, http.MethodGet, e.URL+"/v1/usage", "ordo_nokey", nil); status != http.StatusUnauthorized {
		t.Errorf("usage without a valid key: %d; want 401", status)
	}

	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `ordo_billable_messages_total{category="utility",tenant="acme"} 2`) ||
		strings.Contains(rec.Body.String(), `category="service"`) {
		t.Errorf("metrics lack ordo_billable_messages_total utility 2 (and no service):\n%s", grepLines(rec.Body.String(), "billable"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// imageWebhook is an inbound image message from user with media id.
func imageWebhook(user, wamid, mediaID string) []byte {
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{"id": "WABA", "changes": []any{
		map[string]any{"field": "messages", "value": map[string]any{"messaging_product": "whatsapp",
			"metadata": map[string]string{"phone_number_id": jobstest.PhoneNumberID},
			"contacts": []any{map[string]any{"wa_id": user, "profile": map[string]string{"name": "U"}}},
			"messages": []any{map[string]any{"from": user, "id": wamid, "timestamp": strconv.FormatInt(time.Now().Unix(), 10), "type": "image",
				"image": map[string]any{"id": mediaID, "mime_type": "image/jpeg", "sha256": "x"}}}}}}}}})
	return body
}

// An inbound image's bytes stream through GET /v1/media/{id} with the
// tenant's key (ordo resolves and downloads with the tenant's token);
// another tenant's key and an unknown id are 404; the stored payload (the
// handler's) carries media_url.
func TestMediaStreams(t *testing.T) {
	t.Parallel()
	image := bytes.Repeat([]byte("\xff\xd8jpeg-bytes-"), 300_000) // ~3.6 MB
	var meta *httptest.Server
	meta = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+jobstest.AccessToken {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"code":190,"message":"Invalid OAuth access token"}}`)
			return
		}
		switch r.URL.Path {
		case "/v23.0/media-1":
			_ = json.NewEncoder(w).Encode(map[string]any{"url": meta.URL + "/lookaside/media-1?sig=x", "mime_type": "image/jpeg",
				"file_size": len(image), "id": "media-1", "messaging_product": "whatsapp"})
		case "/lookaside/media-1":
			w.Header().Set("Content-Type", "image/jpeg")
			w.Header().Set("Content-Length", strconv.Itoa(len(image)))
			_, _ = w.Write(image)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":100,"message":"Unsupported get request"}}`)
		}
	}))
	t.Cleanup(meta.Close)
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{WhatsAppAPIURL: meta.URL + "/v23.0"})
	e.deliverSigned(t, imageWebhook("16505550601", "wamid.IMG1", "media-1"))

	req, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/media/media-1", nil)
	req.Header.Set("Authorization", "Bearer "+e.APIKey)
	resp, err := contractClient(t, http.DefaultClient).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, image) || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("media: %d %s, %d bytes; want 200 image/jpeg with the image's %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(got), len(image))
	}

	other, err := e.Tenants.Create(context.Background(), tenants.CreateParams{Slug: "other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, key, id string }{
		{"another tenant's key", other.APIKey, "media-1"},
		{"an id never seen", e.APIKey, "media-2"},
	} {
		status, body := apiCall(t, http.MethodGet, e.URL+"/v1/media/"+c.id, c.key, nil)
		if code, _ := errorCode(t, body); status != http.StatusNotFound || code != "not_found" {
			t.Errorf("%s: %d %s; want 404 not_found", c.what, status, body)
		}
	}

	if status, body := apiCall(t, http.MethodGet, e.URL+"/v1/media/bad%01id", e.APIKey, nil); status != http.StatusBadRequest {
		t.Errorf("a media id with a control character: %d %s; want 400", status, body)
	}

	_, body := apiCall(t, http.MethodGet, e.URL+"/v1/messages/wamid.IMG1", e.APIKey, nil)
	var m struct {
		Payload struct {
			Message struct {
				Image struct {
					ID       string `json:"id"`
					MediaURL string `json:"media_url"`
				} `json:"image"`
			} `json:"message"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Payload.Message.Image.ID != "media-1" || m.Payload.Message.Image.MediaURL != e.URL+"/v1/media/media-1" {
		t.Errorf("stored payload %s: want image.id media-1 and media_url %s", body, e.URL+"/v1/media/media-1")
	}
	if strings.Contains(string(body), jobstest.AccessToken) {
		t.Error("the token leaked into the payload")
	}
}

// Meta's "Send Order Details Message" and "Send Order Status Message"
// examples (its OpenAPI description) are accepted and sent unchanged.
func TestOrderMessagesSentUnchanged(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{}, web.Config{})
	const user = "16505550701"
	for i, name := range []string{"Send_Order_Details_Message", "Send_Order_Status_Message"} {
		raw, err := os.ReadFile("../jobs/whatsapp/testdata/openapi/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var msg map[string]any
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatal(err)
		}
		msg["to"] = user
		body := map[string]any{"message_id": "order-" + strconv.Itoa(i), "conversation_id": user}
		for k, v := range msg {
			body[k] = v
		}
		if status, answer := apiCall(t, http.MethodPost, e.URL+"/v1/messages", e.APIKey, body); status != http.StatusAccepted {
			t.Fatalf("%s: %d %s; want 202", name, status, answer)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = e.WhatsApp.WaitForSends(ctx, i+1)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		sent := e.WhatsApp.SendsTo(user)[i]
		var got map[string]any
		if err := json.Unmarshal(sent.Body, &got); err != nil {
			t.Fatal(err)
		}
		delete(got, "biz_opaque_callback_data")
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(msg)
		if !bytes.Equal(gotJSON, wantJSON) {
			t.Errorf("%s sent as\n%s\nwant\n%s", name, gotJSON, wantJSON)
		}
	}
}

// ordo dev's sandbox plays all of it: the read receipt is recorded beside
// the reply, its statuses carry pricing (so usage counts), and a media id
// resolves to a small generated image.
func TestSandboxEmulatesWhatsAppRules(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"nice picture"}}]}`)
	}))
	t.Cleanup(handler.Close)
	e := start(t, options{sandboxChannel: true, jobs: jobstest.Options{HandlerURL: handler.URL}})
	ctx := context.Background()
	on := true
	if _, err := e.Tenants.Update(ctx, "acme", tenants.UpdateParams{MarkRead: &on}); err != nil {
		t.Fatal(err)
	}
	body := imageWebhook("16505550801", "wamid.SB1", "sandbox-media-1")
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/webhooks/whatsapp/acme", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", whatsapp.Sign(waAppSecret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}
	e.WaitFor("the read receipt and the reply in the sandbox", 20*time.Second, func() bool {
		sends, err := e.Engine.SandboxSends(ctx)
		return err == nil && len(sends) == 2
	})
	sends, _ := e.Engine.SandboxSends(ctx) // newest first
	if !whatsapp.IsReadReceipt(sends[1].Body) || whatsapp.IsReadReceipt(sends[0].Body) {
		t.Errorf("sandbox sends %s then %s; want the read receipt, then the reply", sends[1].Body, sends[0].Body)
	}
	e.WaitFor("the reply's priced statuses", 10*time.Second, func() bool {
		_, body := apiCall(t, http.MethodGet, e.URL+"/v1/usage", e.APIKey, nil)
		var u engine.Usage
		return json.Unmarshal(body, &u) == nil && u.Categories["service"] == engine.UsageCategory{NonBillable: 1}
	})
	mreq, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/media/sandbox-media-1", nil)
	mreq.Header.Set("Authorization", "Bearer "+e.APIKey)
	mresp, err := contractClient(t, http.DefaultClient).Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if mresp.StatusCode != http.StatusOK || mresp.Header.Get("Content-Type") != "image/png" || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Errorf("sandbox media: %d %s, %d bytes; want 200 and a PNG", mresp.StatusCode, mresp.Header.Get("Content-Type"), len(img))
	}
}
