package engine

// A message as its console page shows it: its content, its conversation's
// state, every step with every attempt, what the handler was sent and what
// it answered (the replies it asked for are the send steps' requests), the
// sends with their provider statuses, and its dead letters with their
// errors and resolutions. One read-only snapshot.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminMessageView is one message in full.
type AdminMessageView struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	MessageID      string     `json:"message_id"`
	Seq            int64      `json:"seq"`
	Direction      string     `json:"direction"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	// Payload is the message as accepted (null once retention pruned it).
	Payload json.RawMessage `json:"payload"`
	// HandlerRequest is the body the tenant's handler is POSTed for an
	// inbound message (signed; the signature is not shown).
	HandlerRequest json.RawMessage `json:"handler_request,omitempty"`
	// Conversation is where the message's conversation stands.
	Conversation struct {
		HeadSeq  int64      `json:"head_seq"`
		LastSeq  int64      `json:"last_seq"`
		HaltedAt *time.Time `json:"halted_at"`
	} `json:"conversation"`
	Steps       []AdminMessageStep  `json:"steps"`
	DeadLetters []AdminMessageDead  `json:"dead_letters"`
	Neighbours  AdminMessageAdjoins `json:"neighbours"`
}

// AdminMessageStep is a step with its request: for a send, the Cloud API
// message it sends (the handler's answer, reply by reply).
type AdminMessageStep struct {
	TimelineStep
	Request json.RawMessage `json:"request"`
}

// AdminMessageDead is a dead letter with every error that led to it.
type AdminMessageDead struct {
	ID         string          `json:"id"`
	Reason     string          `json:"reason"`
	Errors     json.RawMessage `json:"errors"`
	CreatedAt  time.Time       `json:"created_at"`
	ResolvedAt *time.Time      `json:"resolved_at"`
	Resolution string          `json:"resolution"`
}

// AdminMessageAdjoins are the message ids before and after it in its
// conversation ("" at either end).
type AdminMessageAdjoins struct {
	Previous string `json:"previous"`
	Next     string `json:"next"`
}

const adminMessageQuery = `
SELECT m.id, t.slug, c.conversation_id, m.message_id, m.seq, m.direction, m.status, m.created_at, m.finished_at,
       m.payload, c.head_seq, c.last_seq, c.halted_at,
       coalesce((SELECT p.message_id FROM ordo.messages p WHERE p.conversation_pk = c.id AND p.seq = m.seq - 1), ''),
       coalesce((SELECT n.message_id FROM ordo.messages n WHERE n.conversation_pk = c.id AND n.seq = m.seq + 1), '')
FROM ordo.tenants t
JOIN ordo.messages m ON m.tenant_id = t.id AND m.message_id = $2
JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE t.slug = $1`

const adminMessageSteps = `
SELECT s.message_pk, s.id, s.idx, s.kind, s.status, s.attempts, s.errors, coalesce(s.provider_message_id, ''),
       coalesce(s.provider_status, ''), s.provider_status_at, s.ambiguous_count, s.started_at, s.finished_at, s.replies_due_at,
       s.request
FROM ordo.steps s WHERE s.message_pk = $1
ORDER BY s.idx`

const adminMessageDeadLetters = `
SELECT d.id::text, d.reason, d.errors, d.created_at, d.resolved_at, coalesce(d.resolution, '')
FROM ordo.dead_letters d WHERE d.message_pk = $1
ORDER BY d.id`

// AdminMessage reads the tenant's message messageID.
func (e *Engine) AdminMessage(ctx context.Context, slug, messageID string) (AdminMessageView, error) {
	var v AdminMessageView
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		var pk int64
		err := tx.QueryRow(ctx, adminMessageQuery, slug, messageID).Scan(&pk, &v.Tenant, &v.ConversationID, &v.MessageID, &v.Seq,
			&v.Direction, &v.Status, &v.CreatedAt, &v.FinishedAt, &v.Payload, &v.Conversation.HeadSeq, &v.Conversation.LastSeq,
			&v.Conversation.HaltedAt, &v.Neighbours.Previous, &v.Neighbours.Next)
		if errors.Is(err, pgx.ErrNoRows) {
			return Errorf(CodeNotFound, "no message %q of tenant %q", messageID, slug)
		}
		if err != nil {
			return err
		}
		if v.Direction == "inbound" && v.Payload != nil {
			v.HandlerRequest = mustJSON(struct {
				Tenant         string          `json:"tenant"`
				ConversationID string          `json:"conversation_id"`
				MessageID      string          `json:"message_id"`
				Seq            int64           `json:"seq"`
				Payload        json.RawMessage `json:"payload"`
			}{v.Tenant, v.ConversationID, v.MessageID, v.Seq, v.Payload})
		}
		rows, _ := tx.Query(ctx, adminMessageSteps, pk)
		if v.Steps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdminMessageStep, error) {
			var s AdminMessageStep
			err := r.Scan(&s.MessagePK, &s.ID, &s.Idx, &s.Kind, &s.Status, &s.Attempts, &s.Errors, &s.ProviderMessageID,
				&s.ProviderStatus, &s.ProviderStatusAt, &s.AmbiguousCount, &s.StartedAt, &s.FinishedAt, &s.RepliesDueAt, &s.Request)
			return s, err
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminMessageDeadLetters, pk)
		v.DeadLetters, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminMessageDead])
		return err
	})
	if err != nil {
		return AdminMessageView{}, translate(err, "read message")
	}
	return v, nil
}
