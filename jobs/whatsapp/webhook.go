package whatsapp

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// WebhookObject is the "object" of every WhatsApp Business webhook.
const WebhookObject = "whatsapp_business_account"

// signaturePrefix starts the X-Hub-Signature-256 header.
const signaturePrefix = "sha256="

// VerifySignature reports whether header, the X-Hub-Signature-256 value
// "sha256=<hex>", is the HMAC-SHA256 of the raw body under the app secret.
// A missing or malformed header, or an empty secret, is false.
func VerifySignature(appSecret string, body []byte, header string) bool {
	if appSecret == "" {
		return false
	}
	header = strings.TrimSpace(header)
	if len(header) < len(signaturePrefix) || !strings.EqualFold(header[:len(signaturePrefix)], signaturePrefix) {
		return false
	}
	got, err := hex.DecodeString(header[len(signaturePrefix):])
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := NewMAC(appSecret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// NewMAC is the HMAC-SHA256 under secret behind every signature ordo checks
// or makes: Meta's X-Hub-Signature-256, and X-Ordo-Signature on the calls to
// a tenant's handler (the same "sha256=<hex>" form). A reader can hash a
// body as it streams in.
func NewMAC(secret string) hash.Hash { return hmac.New(sha256.New, []byte(secret)) }

// Sign returns the X-Hub-Signature-256 header Meta would send for body; the
// sandbox and tests use it to forge genuine webhooks.
func Sign(appSecret string, body []byte) string {
	mac := NewMAC(appSecret)
	mac.Write(body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// VerifyHandshake answers Meta's subscription check (GET with hub.mode,
// hub.verify_token, hub.challenge): ok when the mode is "subscribe" and the
// token matches the tenant's verify token, in which case the challenge must
// be echoed as the response body.
func VerifyHandshake(q url.Values, verifyToken string) (challenge string, ok bool) {
	if verifyToken == "" || q.Get("hub.mode") != "subscribe" {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("hub.verify_token")), []byte(verifyToken)) != 1 {
		return "", false
	}
	challenge = q.Get("hub.challenge")
	if CheckID(challenge) != nil {
		return "", false
	}
	return challenge, true
}

// Webhook is what one webhook delivery carries, flattened over every entry
// and change.
type Webhook struct {
	// Messages are the end users' messages to the business.
	Messages []Inbound
	// Statuses are the delivery updates of the business's messages.
	Statuses []Status
}

// Inbound is one message from an end user.
type Inbound struct {
	// PhoneNumberID is the business number that received it
	// (value.metadata.phone_number_id).
	PhoneNumberID string
	// ConversationID is the end user: Meta's business-scoped user id when it
	// sends one (messages[].user_id or from_user_id, else the matching
	// contact's user_id), else the contact's wa_id, else messages[].from.
	ConversationID string
	// MessageID is the wamid; Meta redelivers webhooks, so it is the
	// idempotency key of the inbound message.
	MessageID string
	// Timestamp is when the user sent it (zero if Meta did not say).
	Timestamp time.Time
	// Type is the message type: text, image, interactive, button, ...
	Type string
	// MediaID and MediaMIME are the media id and mime_type of an image,
	// audio, video, document or sticker message ("" otherwise): only the
	// tenant's token resolves the id (GET /v1/media/{id}).
	MediaID   string
	MediaMIME string
	// Payload is {"message": <the message object>, "contact": <the matching
	// contacts[] entry, omitted if none>, "metadata": <value.metadata>}.
	Payload json.RawMessage
}

// Status is one delivery update of a message the business sent.
type Status struct {
	// PhoneNumberID is the business number that sent the message.
	PhoneNumberID string
	// MessageID is the wamid Send returned.
	MessageID string
	// Status is sent, delivered, read, failed (or a newer value; see
	// StatusRank).
	Status string
	// RecipientID is the end user's wa_id (recipient_id).
	RecipientID string
	// RecipientUserID is the end user's business-scoped user id
	// (recipient_user_id), when Meta sends one.
	RecipientUserID string
	// CallbackData is the biz_opaque_callback_data given to Send: ordo's
	// step id.
	CallbackData string
	// Timestamp is when the status changed (zero if Meta did not say).
	Timestamp time.Time
	// Errors is the raw errors array of a failed status, nil otherwise.
	Errors json.RawMessage
	// Pricing is what Meta bills for the message, when the status says
	// (nil otherwise).
	Pricing *Pricing
}

// Pricing is a status's pricing object: whether Meta bills the message and
// in which conversation category (marketing, utility, authentication,
// service, …, or a category Meta adds later).
type Pricing struct {
	Billable     bool   `json:"billable"`
	PricingModel string `json:"pricing_model"`
	Category     string `json:"category"`
}

// StatusRank orders statuses so that a status webhook is applied only when
// it ranks above the one already recorded; Meta does not guarantee the order
// of status webhooks.
//
//	unknown 0 < sent 1 < failed 2 < delivered 3 < read 4 = played 4
//
// So a failure after "sent" wins, a failure after "delivered" or "read" is
// ignored (the user's device had the message), "delivered" after "failed"
// wins (multi-device users can produce both), and nothing overrides "read".
func StatusRank(s string) int {
	switch s {
	case "sent":
		return 1
	case "failed":
		return 2
	case "delivered":
		return 3
	case "read", "played":
		return 4
	default:
		return 0
	}
}

// Wire shapes. Messages, contacts and metadata are kept raw for Payload.
type (
	webhookEnvelope struct {
		Object string `json:"object"`
		Entry  []struct {
			ID      string `json:"id"`
			Changes []struct {
				Field string          `json:"field"`
				Value json.RawMessage `json:"value"`
			} `json:"changes"`
		} `json:"entry"`
	}
	webhookValue struct {
		Metadata json.RawMessage   `json:"metadata"`
		Contacts []json.RawMessage `json:"contacts"`
		Messages []json.RawMessage `json:"messages"`
		Statuses []json.RawMessage `json:"statuses"`
	}
	webhookMetadata struct {
		PhoneNumberID metaID `json:"phone_number_id"`
	}
	webhookContact struct {
		WaID   metaID `json:"wa_id"`
		UserID metaID `json:"user_id"`
	}
	webhookMessage struct {
		ID         metaID   `json:"id"`
		From       metaID   `json:"from"`
		UserID     metaID   `json:"user_id"`
		FromUserID metaID   `json:"from_user_id"`
		Timestamp  unixTime `json:"timestamp"`
		Type       string   `json:"type"`
	}
	// webhookMedia is the media object of an image, audio, video,
	// document or sticker message.
	webhookMedia struct {
		ID       metaID `json:"id"`
		MIMEType string `json:"mime_type"`
	}
	webhookStatus struct {
		ID              metaID          `json:"id"`
		Status          string          `json:"status"`
		RecipientID     string          `json:"recipient_id"`
		RecipientUserID string          `json:"recipient_user_id"`
		CallbackData    string          `json:"biz_opaque_callback_data"`
		Timestamp       unixTime        `json:"timestamp"`
		Errors          json.RawMessage `json:"errors"`
		Pricing         *Pricing        `json:"pricing"`
	}
	inboundPayload struct {
		Message  json.RawMessage `json:"message"`
		Contact  json.RawMessage `json:"contact,omitempty"`
		Metadata json.RawMessage `json:"metadata,omitempty"`
	}
)

// unixTime reads Meta's timestamps: Unix seconds as a string ("1749416383")
// or a number. Anything else is the zero time rather than a rejected
// webhook: the timestamp is informative, the ids are what matter.
type unixTime struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (u *unixTime) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs > 0 && secs < 1<<40 {
		u.Time = time.Unix(secs, 0).UTC()
	}
	return nil
}

// ParseWebhook reads a messages webhook: every entry[], every change whose
// field is "messages" (others are skipped), and their messages[] and
// statuses[]. It fails on a body that is not a JSON object of object
// "whatsapp_business_account", and on a message or status without a valid
// id or sender: every id is held to CheckID, and one with a lone UTF-16
// surrogate escape is refused (metaID).
func ParseWebhook(body []byte) (Webhook, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Webhook{}, errors.New("parse webhook: body must be a JSON object")
	}
	var env webhookEnvelope
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return Webhook{}, fmt.Errorf("parse webhook: %w", err)
	}
	if env.Object != WebhookObject {
		return Webhook{}, fmt.Errorf("parse webhook: object %q, want %q", truncate(env.Object, 64), WebhookObject)
	}
	var wh Webhook
	for i, entry := range env.Entry {
		for j, change := range entry.Changes {
			if change.Field != "messages" {
				continue
			}
			if err := parseChange(&wh, change.Value); err != nil {
				return Webhook{}, fmt.Errorf("parse webhook: entry[%d].changes[%d]: %w", i, j, err)
			}
		}
	}
	return wh, nil
}

// parseChange appends one change's messages and statuses to wh.
func parseChange(wh *Webhook, raw json.RawMessage) error {
	var v webhookValue
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	var meta webhookMetadata
	if len(v.Metadata) > 0 {
		if err := json.Unmarshal(v.Metadata, &meta); err != nil {
			return fmt.Errorf("value.metadata: %w", err)
		}
		if meta.PhoneNumberID != "" {
			if err := CheckID(string(meta.PhoneNumberID)); err != nil {
				return fmt.Errorf("value.metadata.phone_number_id: %w", err)
			}
		}
	}
	if isJSONNull(v.Metadata) {
		v.Metadata = nil
	}

	contacts := make([]webhookContact, len(v.Contacts))
	for k, rc := range v.Contacts {
		if err := json.Unmarshal(rc, &contacts[k]); err != nil {
			return fmt.Errorf("value.contacts[%d]: %w", k, err)
		}
	}

	for k, rm := range v.Messages {
		in, err := parseInbound(rm, v.Metadata, string(meta.PhoneNumberID), v.Contacts, contacts)
		if err != nil {
			return fmt.Errorf("value.messages[%d]: %w", k, err)
		}
		wh.Messages = append(wh.Messages, in)
	}
	for k, rs := range v.Statuses {
		st, err := parseStatus(rs, string(meta.PhoneNumberID))
		if err != nil {
			return fmt.Errorf("value.statuses[%d]: %w", k, err)
		}
		wh.Statuses = append(wh.Statuses, st)
	}
	return nil
}

func parseInbound(raw, metadata json.RawMessage, phoneNumberID string, rawContacts []json.RawMessage, contacts []webhookContact) (Inbound, error) {
	var m webhookMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return Inbound{}, err
	}
	if err := CheckID(string(m.ID)); err != nil {
		return Inbound{}, fmt.Errorf("id: %w", err)
	}

	userID := cmp.Or(m.UserID, m.FromUserID)
	contact := -1
	for k, c := range contacts {
		if (m.From != "" && c.WaID == m.From) || (userID != "" && c.UserID == userID) {
			contact = k
			break
		}
	}
	if contact < 0 && len(contacts) == 1 {
		// Meta sends one contact per message batch; wa_id and from may be
		// spelled differently for some countries' numbers.
		contact = 0
	}
	var c webhookContact
	if contact >= 0 {
		c = contacts[contact]
	}
	conv := string(cmp.Or(userID, c.UserID, c.WaID, m.From))
	if conv == "" {
		return Inbound{}, errors.New("from: required (no from, user_id or contact)")
	}
	if err := CheckID(conv); err != nil {
		return Inbound{}, fmt.Errorf("sender id: %w", err)
	}

	p := inboundPayload{Message: raw, Metadata: metadata}
	if contact >= 0 {
		p.Contact = rawContacts[contact]
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return Inbound{}, fmt.Errorf("build payload: %w", err)
	}
	in := Inbound{
		PhoneNumberID:  phoneNumberID,
		ConversationID: conv,
		MessageID:      string(m.ID),
		Timestamp:      m.Timestamp.Time,
		Type:           m.Type,
		Payload:        payload,
	}
	if IsMediaType(m.Type) {
		var fields map[string]json.RawMessage
		var media webhookMedia
		// A malformed media object leaves the message without a media id
		// rather than refuse the delivery: the message itself is kept.
		if json.Unmarshal(raw, &fields) == nil && json.Unmarshal(fields[m.Type], &media) == nil && CheckID(string(media.ID)) == nil {
			in.MediaID, in.MediaMIME = string(media.ID), truncate(media.MIMEType, 255)
		}
	}
	return in, nil
}

func parseStatus(raw json.RawMessage, phoneNumberID string) (Status, error) {
	var s webhookStatus
	if err := json.Unmarshal(raw, &s); err != nil {
		return Status{}, err
	}
	if err := CheckID(string(s.ID)); err != nil {
		return Status{}, fmt.Errorf("id: %w", err)
	}
	if s.Status == "" {
		return Status{}, errors.New("status: required")
	}
	if isJSONNull(s.Errors) {
		s.Errors = nil
	}
	return Status{
		PhoneNumberID:   phoneNumberID,
		MessageID:       string(s.ID),
		Status:          truncate(s.Status, 64),
		RecipientID:     s.RecipientID,
		RecipientUserID: s.RecipientUserID,
		CallbackData:    s.CallbackData,
		Timestamp:       s.Timestamp.Time,
		Errors:          s.Errors,
		Pricing:         cleanPricing(s.Pricing),
	}, nil
}

func isJSONNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// DeliveryFailure is what a failed status says went wrong: Meta took the
// message and could not deliver it. It never went out, so it is classed
// like the same error answered to a send, except that "outcome unknown"
// (131000, …) means "not delivered" here and is retried.
type DeliveryFailure struct {
	Code    int    // error.code; NoCode when Meta gave none
	Message string // "131026 Message undeliverable", for the error history
	Class   Class
}

// Failure reads a failed status's errors[0]; ok is false for any other
// status.
func (s Status) Failure() (f DeliveryFailure, ok bool) {
	if s.Status != "failed" {
		return f, false
	}
	var errs []struct {
		Code    *int   `json:"code"`
		Title   string `json:"title"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(s.Errors, &errs)
	f.Code, f.Message = NoCode, "delivery failed"
	if len(errs) > 0 {
		if errs[0].Code != nil {
			f.Code = *errs[0].Code
		}
		text := cmp.Or(errs[0].Title, errs[0].Message)
		if f.Code != NoCode {
			text = strings.TrimSpace(strconv.Itoa(f.Code) + " " + text)
		}
		f.Message = "delivery failed: " + cmp.Or(text, "no reason given")
	}
	f.Class = Classify(http.StatusBadRequest, f.Code)
	if f.Code == NoCode || f.Class == Ambiguous {
		f.Class = Retry
	}
	return f, true
}
