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
       t.created_at,
       (SELECT d.down_since FROM ordo.dependencies d WHERE d.tenant_id = t.id AND d.what = 'handler'),
       (SELECT d.down_since FROM ordo.dependencies d WHERE d.tenant_id = t.id AND d.what = 'number')
FROM ordo.tenants t
ORDER BY t.slug
LIMIT 200`

// Halted conversations first, then the biggest backlogs: read from the
// conversations with work (activeConversations), never a scan of every
// conversation.
const adminAttentionQuery = `
WITH active AS (` + activeConversations + `)
SELECT t.slug, c.conversation_id, c.head_seq, c.last_seq, c.last_seq - c.head_seq, c.halted_at
FROM active a
JOIN ordo.conversations c ON c.id = a.id
JOIN ordo.tenants t ON t.id = c.tenant_id
WHERE c.halted_at IS NOT NULL OR c.last_seq > c.head_seq
ORDER BY c.halted_at IS NULL, c.last_seq - c.head_seq DESC, c.id
LIMIT 20`

// The newest open dead letters: what broke last.
const adminDeadLettersQuery = `
SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
       coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
       coalesce(d.resolution, '')
FROM ordo.dead_letters d
JOIN ordo.tenants t ON t.id = d.tenant_id
JOIN ordo.messages m ON m.id = d.message_pk
JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE d.resolved_at IS NULL
ORDER BY d.id DESC LIMIT 10`

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
	// HandlerDownSince and NumberDownSince are set while the tenant's
	// handler, or its WhatsApp number at the Cloud API, is unreachable:
	// its conversations wait for it (no dead letter, no halt).
	HandlerDownSince *time.Time `json:"handler_down_since"`
	NumberDownSince  *time.Time `json:"number_down_since"`
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

// AdminOverview is the console's overview, read in one snapshot: the live
// numbers, the conversations that need attention, the newest open dead
// letters and, under ordo dev, what the sandbox "sent".
type AdminOverview struct {
	At           time.Time           `json:"at"`
	Sandbox      bool                `json:"sandbox"`
	Tiles        Tiles               `json:"tiles"`
	Attention    []AdminConversation `json:"attention"`
	DeadLetters  []AdminDeadLetter   `json:"dead_letters"`
	SandboxSends []AdminSandboxSend  `json:"sandbox_sends"`
}

// AdminOverview reads the overview; withSandbox adds the sandbox
// channel's recent sends (ordo dev). Every part is bounded by what is live
// (tenants, conversations with work, open dead letters, the counters of
// the last TilesWindow), never by how many messages the database holds.
func (e *Engine) AdminOverview(ctx context.Context, withSandbox bool) (AdminOverview, error) {
	if err := e.CompactStats(ctx); err != nil {
		return AdminOverview{}, err
	}
	o := AdminOverview{Sandbox: withSandbox, SandboxSends: []AdminSandboxSend{}}
	// One round trip: a refresh is as fast as the slowest statement.
	err := e.adminReadBatch(ctx, func(b *pgx.Batch) {
		queueTiles(b)
		b.Queue(adminAttentionQuery)
		b.Queue(adminDeadLettersQuery)
		if withSandbox {
			b.Queue(listSandboxSends)
		}
	}, func(br pgx.BatchResults) error { return o.read(br, withSandbox) })
	if err != nil {
		return AdminOverview{}, translate(err, "read overview")
	}
	return o, nil
}

func (o *AdminOverview) read(br pgx.BatchResults, withSandbox bool) error {
	var err error
	if o.Tiles, err = readTiles(br); err != nil {
		return err
	}
	o.At = o.Tiles.At
	rows, _ := br.Query()
	if o.Attention, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminConversation]); err != nil {
		return err
	}
	rows, _ = br.Query()
	if o.DeadLetters, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminDeadLetter]); err != nil {
		return err
	}
	if !withSandbox {
		return nil
	}
	rows, _ = br.Query()
	sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
	if err != nil {
		return err
	}
	for _, snd := range sends {
		o.SandboxSends = append(o.SandboxSends, readableSend(snd))
	}
	return nil
}

// AdminTenants lists the tenants (the first 200 by slug) with their
// settings, credential names and open dead letters.
func (e *Engine) AdminTenants(ctx context.Context) ([]AdminTenant, error) {
	var out []AdminTenant
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, adminTenantsQuery)
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminTenant])
		return err
	})
	if err != nil {
		return nil, translate(err, "list tenants")
	}
	return out, nil
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
