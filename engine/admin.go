package engine

// The operator's view across tenants, read for the admin page: who is
// configured, which conversations need attention, what happened to recent
// messages, the dead letters, and under ordo dev what the sandbox "sent".

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// Operator queries read across tenants on purpose. Each list is bounded: the
// page is refreshed every few seconds and must stay cheap on a busy database.

const adminTenantsQuery = `
SELECT t.slug, t.name, t.handler_url IS NOT NULL, t.on_dead_letter, t.ambiguous, t.max_attempts,
       t.send_rate, t.pair_gap_ms, t.weight, t.max_concurrency, t.sending_paused_at, coalesce(t.sending_paused_reason, ''),
       coalesce((SELECT array_agg(cr.name ORDER BY cr.name) FROM ordo.credentials cr WHERE cr.tenant_id = t.id), '{}'),
       (SELECT count(*) FROM ordo.dead_letters d WHERE d.tenant_id = t.id AND d.resolved_at IS NULL),
       t.created_at
FROM ordo.tenants t
ORDER BY t.slug
LIMIT 200`

// Halted conversations first, then the biggest backlogs.
const adminAttentionQuery = `
SELECT t.slug, c.conversation_id, c.head_seq, c.last_seq, c.last_seq - c.head_seq, c.halted_at
FROM ordo.conversations c
JOIN ordo.tenants t ON t.id = c.tenant_id
WHERE c.halted_at IS NOT NULL OR c.last_seq > c.head_seq
ORDER BY c.halted_at IS NULL, c.last_seq - c.head_seq DESC, c.id
LIMIT 50`

const adminMessagesQuery = `
SELECT t.slug, c.conversation_id, m.message_id, m.seq, m.direction, m.status, m.created_at, m.finished_at,
       (SELECT count(*) FROM ordo.steps s WHERE s.message_pk = m.id AND s.kind = 'send' AND s.status = 'done'),
       coalesce((SELECT s.errors -> -1 ->> 'error' FROM ordo.steps s
                 WHERE s.message_pk = m.id AND jsonb_array_length(s.errors) > 0
                 ORDER BY s.idx DESC LIMIT 1), '')
FROM ordo.messages m
JOIN ordo.tenants t ON t.id = m.tenant_id
JOIN ordo.conversations c ON c.id = m.conversation_pk
ORDER BY m.id DESC
LIMIT 50`

// Open dead letters oldest first, then the recently resolved ones so an
// operator sees what a Replay or Skip did.
const adminDeadLettersQuery = `
(SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
        coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
        coalesce(d.resolution, '')
 FROM ordo.dead_letters d
 JOIN ordo.tenants t ON t.id = d.tenant_id
 JOIN ordo.messages m ON m.id = d.message_pk
 JOIN ordo.conversations c ON c.id = m.conversation_pk
 WHERE d.resolved_at IS NULL
 ORDER BY d.id LIMIT 100)
UNION ALL
(SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
        coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
        coalesce(d.resolution, '')
 FROM ordo.dead_letters d
 JOIN ordo.tenants t ON t.id = d.tenant_id
 JOIN ordo.messages m ON m.id = d.message_pk
 JOIN ordo.conversations c ON c.id = m.conversation_pk
 WHERE d.resolved_at IS NOT NULL
 ORDER BY d.resolved_at DESC LIMIT 20)`

// AdminTenant is a tenant as the admin page shows it: settings and the names
// of its credentials, never a secret nor the handler URL itself (n8n webhook
// URLs are bearer secrets of their own).
type AdminTenant struct {
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	HandlerURLSet bool   `json:"handler_url_set"`
	OnDeadLetter  string `json:"on_dead_letter"`
	Ambiguous     string `json:"ambiguous"`
	MaxAttempts   int    `json:"max_attempts"`
	// SendRate is sends per second per phone number (0: unpaced), PairGapMS
	// the gap between two sends to one user.
	SendRate  int `json:"send_rate"`
	PairGapMS int `json:"pair_gap_ms"`
	// Weight is the tenant's share of the workers when several tenants
	// have work; MaxConcurrency caps its drains at once (0: no cap).
	Weight         int `json:"weight"`
	MaxConcurrency int `json:"max_concurrency"`
	// SendingPausedAt is set while Meta refuses the tenant's credential or
	// account: its messages wait for an operator's ordo tenant resume.
	SendingPausedAt     *time.Time `json:"sending_paused_at"`
	SendingPausedReason string     `json:"sending_paused_reason"`
	Credentials         []string   `json:"credentials"`
	OpenDeadLetters     int64      `json:"open_dead_letters"`
	CreatedAt           time.Time  `json:"created_at"`
}

// AdminConversation is a conversation that is halted or has a backlog.
type AdminConversation struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	HeadSeq        int64      `json:"head_seq"`
	LastSeq        int64      `json:"last_seq"`
	Backlog        int64      `json:"backlog"`
	HaltedAt       *time.Time `json:"halted_at"`
}

// AdminMessage is a recent message with its outcome.
type AdminMessage struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	MessageID      string     `json:"message_id"`
	Seq            int64      `json:"seq"`
	Direction      string     `json:"direction"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	SendsDone      int64      `json:"sends_done"`
	LastError      string     `json:"last_error"`
}

// AdminDeadLetter is a dead letter without its message's payload.
type AdminDeadLetter struct {
	ID             string     `json:"id"`
	Tenant         string     `json:"tenant"`
	MessageID      string     `json:"message_id"`
	ConversationID string     `json:"conversation_id"`
	Seq            int64      `json:"seq"`
	MessageStatus  string     `json:"message_status"`
	Reason         string     `json:"reason"`
	LastError      string     `json:"last_error"`
	Attempts       int        `json:"attempts"`
	CreatedAt      time.Time  `json:"created_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	Resolution     string     `json:"resolution"`
}

// AdminSandboxSend is a sandbox send reduced to what a person reads.
type AdminSandboxSend struct {
	ID            int64     `json:"id"`
	PhoneNumberID string    `json:"phone_number_id"`
	To            string    `json:"to"`
	Type          string    `json:"type"`
	Text          string    `json:"text"`
	WAMID         string    `json:"wamid"`
	CreatedAt     time.Time `json:"created_at"`
}

// AdminOverview is everything the page shows, read in one snapshot.
type AdminOverview struct {
	At           time.Time           `json:"at"`
	Sandbox      bool                `json:"sandbox"`
	Tenants      []AdminTenant       `json:"tenants"`
	Attention    []AdminConversation `json:"attention"`
	Messages     []AdminMessage      `json:"messages"`
	DeadLetters  []AdminDeadLetter   `json:"dead_letters"`
	SandboxSends []AdminSandboxSend  `json:"sandbox_sends"`
}

// AdminOverview reads the admin page's data across tenants in one read-only
// snapshot, so the counts and lists agree with each other; withSandbox adds
// the sandbox channel's recent sends (ordo dev).
func (e *Engine) AdminOverview(ctx context.Context, withSandbox bool) (AdminOverview, error) {
	o := AdminOverview{Sandbox: withSandbox}
	err := pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&o.At); err != nil {
			return err
		}
		var err error
		rows, _ := tx.Query(ctx, adminTenantsQuery)
		if o.Tenants, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminTenant]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminAttentionQuery)
		if o.Attention, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminConversation]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminMessagesQuery)
		if o.Messages, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminMessage]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminDeadLettersQuery)
		if o.DeadLetters, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminDeadLetter]); err != nil {
			return err
		}
		if !withSandbox {
			return nil
		}
		rows, _ = tx.Query(ctx, listSandboxSends)
		sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
		if err != nil {
			return err
		}
		o.SandboxSends = make([]AdminSandboxSend, 0, len(sends))
		for _, snd := range sends {
			o.SandboxSends = append(o.SandboxSends, readableSend(snd))
		}
		return nil
	})
	if err != nil {
		return AdminOverview{}, &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	return o, nil
}

// readableSend picks the recipient and the text a person would see out of a
// Cloud API request body.
func readableSend(snd SandboxSend) AdminSandboxSend {
	var body struct {
		To       string                `json:"to"`
		Type     string                `json:"type"`
		Text     struct{ Body string } `json:"text"`
		Template struct{ Name string } `json:"template"`
	}
	_ = json.Unmarshal(snd.Body, &body)
	text := body.Text.Body
	if body.Type == "template" {
		text = "template " + body.Template.Name
	}
	if whatsapp.IsReadReceipt(snd.Body) {
		// ordo's --mark-read: no message, the user's ticks and "typing…".
		var r struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(snd.Body, &r)
		body.Type, text = "read", "read receipt + typing indicator for "+r.MessageID
	}
	return AdminSandboxSend{ID: snd.ID, PhoneNumberID: snd.PhoneNumberID, To: body.To, Type: body.Type, Text: text, WAMID: snd.WAMID, CreatedAt: snd.CreatedAt}
}
