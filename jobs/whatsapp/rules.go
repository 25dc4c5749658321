package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// WhatsApp's own rules that ordo applies before Meta would (issue 26; the
// contract is README.md beside this file).

// ServiceWindow is WhatsApp's customer service window: a message that is
// not a template reaches a user only within this long after the user's
// last message (Meta refuses it with 131047 after).
const ServiceWindow = 24 * time.Hour

// OutsideWindow is the reason a message sent outside the service window is
// refused, in the words ordo.enqueue_message uses (SQLSTATE ORW01): end is
// when the window closed.
func OutsideWindow(end time.Time) string {
	return fmt.Sprintf("outside the 24-hour customer service window: it closed at %s (24 hours after the user's last message); until the user writes again only a template can be sent",
		end.UTC().Format("2006-01-02T15:04:05Z"))
}

// IsTemplate reports whether raw, an outbound message object, is a
// template message: the one kind the service window lets through.
func IsTemplate(raw []byte) bool {
	var m struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Type == "template"
}

// mediaTypes are the inbound message types whose object carries a media id.
var mediaTypes = []string{"image", "audio", "video", "document", "sticker"}

// IsMediaType reports whether an inbound message of type t carries media.
func IsMediaType(t string) bool {
	for _, m := range mediaTypes {
		if m == t {
			return true
		}
	}
	return false
}

// WithMediaURL returns an inbound payload ({"message": {…}, …}) with
// url set as "media_url" in the message's media object, beside Meta's id:
// where the tenant's handler fetches the bytes with its ordo API key.
// A payload it cannot read is returned unchanged.
func WithMediaURL(payload json.RawMessage, mediaType, url string) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(p["message"], &msg) != nil {
		return payload
	}
	var media map[string]json.RawMessage
	if json.Unmarshal(msg[mediaType], &media) != nil || media == nil {
		return payload
	}
	media["media_url"], _ = json.Marshal(url)
	var err error
	if msg[mediaType], err = json.Marshal(media); err != nil {
		return payload
	}
	if p["message"], err = json.Marshal(msg); err != nil {
		return payload
	}
	out, err := json.Marshal(p)
	if err != nil {
		return payload
	}
	return out
}

// cleanPricing keeps a status's pricing only when it names a category,
// trimmed to printable text of at most 64 bytes (it becomes a metric
// label and a JSON key).
func cleanPricing(p *Pricing) *Pricing {
	if p == nil {
		return nil
	}
	p.Category = truncate(strings.Map(dropUnprintable, p.Category), 64)
	p.PricingModel = truncate(strings.Map(dropUnprintable, p.PricingModel), 64)
	if p.Category == "" {
		return nil
	}
	return p
}

func dropUnprintable(r rune) rune {
	if !unicode.IsPrint(r) {
		return -1
	}
	return r
}

// readReceipt is the body that marks an inbound message read and shows the
// user a typing indicator until the next message is sent (or 25 s pass).
type readReceipt struct {
	MessagingProduct string `json:"messaging_product"`
	Status           string `json:"status"`
	MessageID        string `json:"message_id"`
	TypingIndicator  struct {
		Type string `json:"type"`
	} `json:"typing_indicator"`
}

// ReadReceiptBody is the request MarkRead posts for wamid.
func ReadReceiptBody(wamid string) []byte {
	r := readReceipt{MessagingProduct: "whatsapp", Status: "read", MessageID: wamid}
	r.TypingIndicator.Type = "text"
	b, _ := json.Marshal(r)
	return b
}

// IsReadReceipt reports whether body, posted to /{phone}/messages, is a
// read receipt rather than a message (the sandbox tells them apart).
func IsReadReceipt(body []byte) bool {
	var r struct {
		Status    string `json:"status"`
		MessageID string `json:"message_id"`
		Type      string `json:"type"`
	}
	return json.Unmarshal(bytes.TrimSpace(body), &r) == nil && r.Status == "read" && r.MessageID != "" && r.Type == ""
}

// MarkRead marks the inbound message wamid read and shows the user a
// typing indicator, through the number of cred: POST
// {BaseURL}/{phone_number_id}/messages with ReadReceiptBody. Every failure
// is a *SendError, classified as a send's would be (the caller decides
// whether it matters: for ordo it never blocks a reply).
func (c *Client) MarkRead(ctx context.Context, cred Credential, wamid string) error {
	if err := cred.Validate(); err != nil {
		return &SendError{Class: Paused, Code: NoCode, Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(cred.PhoneNumberID), bytes.NewReader(ReadReceiptBody(wamid)))
	if err != nil {
		return &SendError{Class: Permanent, Code: NoCode, Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Authorization", "Bearer "+cred.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return transportError(ctx, err, true, cred.AccessToken)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return apiError(resp, raw, cred.AccessToken, time.Now())
}
