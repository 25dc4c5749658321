package engine

// The sandbox is ordo dev's stand-in for the WhatsApp Cloud API: every send
// it takes is recorded in ordo.sandbox_sends so a first user sees what would
// have reached WhatsApp (on the admin page and at GET /sandbox/sends).

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// SandboxWAMIDPrefix starts every message id the sandbox answers with, and
// no id WhatsApp gives: a step's provider_message_id says where it went.
const SandboxWAMIDPrefix = "wamid.sandbox."

const insertSandboxSend = `
INSERT INTO ordo.sandbox_sends (phone_number_id, wamid, body)
VALUES ($1, 'wamid.sandbox.' || md5(random()::text), $2)
RETURNING wamid`

// IsSandboxWAMID reports whether a provider message id is the sandbox's.
func IsSandboxWAMID(id string) bool { return strings.HasPrefix(id, SandboxWAMIDPrefix) }

const listSandboxSends = `
SELECT id, phone_number_id, wamid, body, created_at FROM ordo.sandbox_sends ORDER BY id DESC LIMIT 100`

// SandboxSend is one message the sandbox channel was asked to send.
type SandboxSend struct {
	ID            int64           `json:"id"`
	PhoneNumberID string          `json:"phone_number_id"`
	WAMID         string          `json:"wamid"`
	Body          json.RawMessage `json:"body"`
	CreatedAt     time.Time       `json:"created_at"`
}

// RecordSandboxSend stores a send the sandbox accepted and returns the wamid
// it answers with.
func (e *Engine) RecordSandboxSend(ctx context.Context, phoneNumberID string, body []byte) (string, error) {
	var wamid string
	if err := e.pool.QueryRow(ctx, insertSandboxSend, phoneNumberID, body).Scan(&wamid); err != nil {
		return "", translate(err, "record sandbox send")
	}
	return wamid, nil
}

// SandboxSends returns the sandbox's 100 most recent sends, newest first.
func (e *Engine) SandboxSends(ctx context.Context) ([]SandboxSend, error) {
	rows, _ := e.pool.Query(ctx, listSandboxSends)
	sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	return sends, nil
}

// sandboxStepTenant finds the tenant of a send step by its id (the
// biz_opaque_callback_data a send carries): the sandbox's statuses go to
// the tenant that sent.
const sandboxStepTenant = `
SELECT t.id, t.slug FROM ordo.steps s
JOIN ordo.messages m ON m.id = s.message_pk
JOIN ordo.tenants t ON t.id = m.tenant_id
WHERE s.id = $1 AND s.kind = 'send'`

// SandboxStatuses plays Meta's status webhooks for a send the sandbox took:
// "sent" then "delivered", each with pricing as Meta would price it (a
// template is billable, in its category; a free-form reply is a free
// service message), stored like a genuine delivery for the tenant whose
// step callbackData names. A send without a step of ordo's gets none.
func (e *Engine) SandboxStatuses(ctx context.Context, phoneNumberID, wamid, callbackData string, body []byte) error {
	id, err := strconv.ParseInt(callbackData, 10, 64)
	if err != nil {
		return nil
	}
	var t WebhookTenant
	if err := e.pool.QueryRow(ctx, sandboxStepTenant, id).Scan(&t.ID, &t.Slug); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return translate(err, "sandbox statuses")
	}
	t.PhoneNumberID = phoneNumberID
	pricing := &whatsapp.Pricing{Billable: false, PricingModel: "PMP", Category: "service"}
	if whatsapp.IsTemplate(body) {
		pricing = &whatsapp.Pricing{Billable: true, PricingModel: "PMP", Category: sandboxTemplateCategory(body)}
	}
	var sts []whatsapp.Status
	for _, s := range []string{"sent", "delivered"} {
		sts = append(sts, whatsapp.Status{PhoneNumberID: phoneNumberID, MessageID: wamid, Status: s,
			CallbackData: callbackData, Timestamp: time.Now(), Pricing: pricing})
	}
	_, err = e.StoreWebhook(ctx, t, whatsapp.Webhook{Statuses: sts})
	return err
}

// sandboxTemplateCategory guesses a template's pricing category from its
// name, as the sandbox has no template registry: "auth…" and "otp…" are
// authentication, "promo…" and "offer…" marketing, anything else utility.
func sandboxTemplateCategory(body []byte) string {
	var m struct {
		Template struct{ Name string } `json:"template"`
	}
	_ = json.Unmarshal(body, &m)
	n := strings.ToLower(m.Template.Name)
	switch {
	case strings.HasPrefix(n, "auth"), strings.HasPrefix(n, "otp"):
		return "authentication"
	case strings.HasPrefix(n, "promo"), strings.HasPrefix(n, "offer"), strings.HasPrefix(n, "marketing"):
		return "marketing"
	}
	return "utility"
}
