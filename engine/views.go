package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// Step is one checkpointed unit of a message's work, as users see it.
type Step struct {
	ID                string `json:"id"`
	Kind              string `json:"kind"`
	Status            string `json:"status"`
	Attempts          int    `json:"attempts"`
	LastError         string `json:"last_error,omitempty"`
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	ProviderStatus    string `json:"provider_status,omitempty"`
	// Sandbox: the send went to ordo dev's sandbox, not to WhatsApp.
	Sandbox bool `json:"sandbox,omitempty"`
	// AmbiguousCount is how many of the step's sends ended without a
	// definite answer (the message may have gone out).
	AmbiguousCount int `json:"ambiguous_count"`
	// RepliesDueAt: a handle step "waiting" for its async handler's replies
	// waits until then (then the dead-letter policy applies).
	RepliesDueAt *time.Time `json:"replies_due_at,omitempty"`
}

// Message is a message with its steps.
type Message struct {
	ID             string          `json:"id"`
	MessageID      string          `json:"message_id"`
	ConversationID string          `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	Direction      string          `json:"direction"`
	Status         string          `json:"status"`
	Payload        json.RawMessage `json:"payload"`
	CreatedAt      time.Time       `json:"created_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// Pruned: the message's content (payload, steps) was removed after its
	// tenant's retention or by a purge; what is left is its dedupe record.
	Pruned bool   `json:"pruned,omitempty"`
	Steps  []Step `json:"steps"`
}

const messageQuery = `
SELECT m.id::text, m.message_id, c.conversation_id, m.seq, m.direction, m.status, m.payload, m.created_at, m.finished_at
FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE m.tenant_id = $1 AND m.message_id = $2`

// stepsQuery reads a message's steps as the API shows them: a send not
// checked yet (an SQL message's, 'unchecked'), or refused by a check and
// waiting for its drain to dead-letter it ('refused', its reason the last
// error), is pending — not attempted.
const stepsQuery = `
SELECT s.id::text, s.kind, CASE WHEN s.status IN ('unchecked', 'refused') THEN 'pending' ELSE s.status END, s.attempts,
       CASE WHEN s.status <> 'done' THEN coalesce(s.errors -> -1 ->> 'error', '') ELSE '' END,
       coalesce(s.provider_message_id, ''), coalesce(s.provider_status, ''),
       s.ambiguous_count, CASE WHEN s.status = 'waiting' THEN s.replies_due_at END
FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk
WHERE m.tenant_id = $1 AND m.message_id = $2
ORDER BY s.idx`

// Message returns tenant's message messageID with its steps; CodeNotFound for
// another tenant's.
func (e *Engine) Message(ctx context.Context, tenantID int64, messageID string) (Message, error) {
	var m Message
	err := e.pool.QueryRow(ctx, messageQuery, tenantID, messageID).Scan(
		&m.ID, &m.MessageID, &m.ConversationID, &m.Seq, &m.Direction, &m.Status, &m.Payload, &m.CreatedAt, &m.FinishedAt)
	if err != nil {
		return Message{}, translate(err, "read message")
	}
	m.Pruned = m.Payload == nil
	rows, _ := e.pool.Query(ctx, stepsQuery, tenantID, messageID)
	m.Steps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Step, error) {
		var s Step
		err := r.Scan(&s.ID, &s.Kind, &s.Status, &s.Attempts, &s.LastError, &s.ProviderMessageID, &s.ProviderStatus, &s.AmbiguousCount, &s.RepliesDueAt)
		s.Sandbox = IsSandboxWAMID(s.ProviderMessageID)
		return s, err
	})
	if err != nil {
		return Message{}, translate(err, "read steps")
	}
	return m, nil
}

// MessageSummary is a message in a conversation listing.
type MessageSummary struct {
	MessageID string    `json:"message_id"`
	Seq       int64     `json:"seq"`
	Direction string    `json:"direction"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// Conversation is a conversation's position and its recent messages.
type Conversation struct {
	ConversationID string `json:"conversation_id"`
	Status         string `json:"status"` // active|halted
	HeadSeq        int64  `json:"head_seq"`
	LastSeq        int64  `json:"last_seq"`
	// Sending is "paused" while the tenant's sending is paused (Meta refused
	// its credential or account) and "active" otherwise.
	Sending string `json:"sending"`
	// SendingPausedReason says why sending is paused.
	SendingPausedReason string `json:"sending_paused_reason,omitempty"`
	// LastInboundAt is the WhatsApp timestamp of the user's latest message
	// ordo received through the webhook, and ServiceWindowEndsAt 24 hours
	// after it: from then on only a template can be sent until the user
	// writes again. Both null when no inbound message was seen (Meta
	// decides).
	LastInboundAt       *time.Time       `json:"last_inbound_at"`
	ServiceWindowEndsAt *time.Time       `json:"service_window_ends_at"`
	Messages            []MessageSummary `json:"messages"`
}

// RecentMessages is how many messages a conversation view lists, newest first.
const RecentMessages = 50

const conversationQuery = `
SELECT c.id, c.conversation_id, CASE WHEN c.halted_at IS NULL THEN 'active' ELSE 'halted' END, c.head_seq, c.last_seq,
       CASE WHEN t.sending_paused_at IS NULL THEN 'active' ELSE 'paused' END, coalesce(t.sending_paused_reason, ''),
       c.last_inbound_at
FROM ordo.conversations c JOIN ordo.tenants t ON t.id = c.tenant_id
WHERE c.tenant_id = $1 AND c.conversation_id = $2`

const recentQuery = `
SELECT m.message_id, m.seq, m.direction, m.status, m.created_at
FROM ordo.messages m WHERE m.conversation_pk = $1
ORDER BY m.seq DESC LIMIT $2`

// Conversation returns tenant's conversation conversationID; CodeNotFound for
// another tenant's.
func (e *Engine) Conversation(ctx context.Context, tenantID int64, conversationID string) (Conversation, error) {
	var (
		c  Conversation
		pk int64
	)
	err := e.pool.QueryRow(ctx, conversationQuery, tenantID, conversationID).Scan(&pk, &c.ConversationID, &c.Status, &c.HeadSeq, &c.LastSeq, &c.Sending, &c.SendingPausedReason, &c.LastInboundAt)
	if err != nil {
		return Conversation{}, translate(err, "read conversation")
	}
	if c.LastInboundAt != nil {
		end := c.LastInboundAt.Add(whatsapp.ServiceWindow)
		c.ServiceWindowEndsAt = &end
	}
	rows, _ := e.pool.Query(ctx, recentQuery, pk, RecentMessages)
	c.Messages, err = pgx.CollectRows(rows, pgx.RowToStructByPos[MessageSummary])
	if err != nil {
		return Conversation{}, translate(err, "read conversation messages")
	}
	return c, nil
}
