package engine

// Finding a message on the admin page (by its id, its provider's wamid or
// its conversation's id) and a conversation's timeline: every message in
// seq order with each step's attempts, provider statuses, dead letters, and
// the ready row of the drain that holds it.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminSearch selects messages on the console.
type AdminSearch struct {
	// Q is the start of a message id (any tenant's, in byte order), or a
	// provider message id (wamid) or conversation id matched exactly; empty:
	// every message, newest first.
	Q         string
	Tenant    string // slug; empty: every tenant
	Status    string // queued|running|done|dead|skipped; empty: any
	Direction string // inbound|outbound; empty: either
	Since     time.Time
	Until     time.Time // zero: no bound
	// Cursor is the Next of the page before; empty: the first page.
	Cursor string
	Limit  int // 1..200; 0 means 50
}

var messageStatuses = map[string]bool{"": true, "queued": true, "running": true, "done": true, "dead": true, "skipped": true}

func (s *AdminSearch) validate() error {
	if len(s.Q) > 1024 {
		return Errorf(CodeInvalid, "q: must be at most 1024 bytes")
	}
	if !messageStatuses[s.Status] {
		return Errorf(CodeInvalid, "status: must be queued, running, done, dead or skipped")
	}
	if s.Direction != "" && s.Direction != "inbound" && s.Direction != "outbound" {
		return Errorf(CodeInvalid, "direction: must be inbound or outbound")
	}
	if s.Until.IsZero() {
		s.Until = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if s.Limit == 0 {
		s.Limit = 50
	}
	if s.Limit < 1 || s.Limit > 200 {
		return Errorf(CodeInvalid, "limit: must be 1 to 200")
	}
	return nil
}

// searchCursor is where a page ended: the last message's id (pk) and, for
// a search by Q (ordered by message id), its message id.
type searchCursor struct {
	MessageID string `json:"m,omitempty"`
	PK        int64  `json:"p"`
}

func (c searchCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (searchCursor, error) {
	var c searchCursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.PK < 0 {
		return c, Errorf(CodeInvalid, "cursor: not one this console handed out")
	}
	return c, nil
}

// AdminFoundMessage is a message as the search lists it.
type AdminFoundMessage struct {
	PK             int64      `json:"-"`
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	MessageID      string     `json:"message_id"`
	Seq            int64      `json:"seq"`
	Direction      string     `json:"direction"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	WAMIDs         []string   `json:"wamids"`
	LastError      string     `json:"last_error"`
}

const adminFoundColumns = `
SELECT m.id, t.slug, c.conversation_id, m.message_id, m.seq, m.direction, m.status, m.created_at, m.finished_at,
       coalesce((SELECT array_agg(s.provider_message_id ORDER BY s.idx) FROM ordo.steps s
                 WHERE s.message_pk = m.id AND s.provider_message_id IS NOT NULL), '{}'),
       coalesce((SELECT s.errors -> -1 ->> 'error' FROM ordo.steps s
                 WHERE s.message_pk = m.id AND jsonb_array_length(s.errors) > 0
                 ORDER BY s.idx DESC LIMIT 1), '')`

// The filters every search applies to a message m ($2 tenant slug, $3
// status, $4 direction, $5 since, $6 until).
const adminSearchFilters = `
    ($2 = '' OR m.tenant_id = (SELECT id FROM ordo.tenants WHERE slug = $2))
    AND ($3 = '' OR m.status = $3) AND ($4 = '' OR m.direction = $4)
    AND m.created_at >= $5 AND m.created_at < $6`

// With a Q: the message ids that start with it, a range scan of
// messages_message_id_prefix_idx in byte order from ($10, $11) — the
// cursor, or (Q, 0) when the cursor is before Q: one row comparison, the
// scan's start (a second lower bound beside it would leave btree to start
// from the weaker one). An id is printable, so none holds U+10FFFF and
// Q || U+10FFFF bounds the range. The messages of conversations with that
// exact id (an index probe per tenant) and those of a wamid join them, in
// the same order, from the cursor ($8, $9).
const adminSearchByQ = `
WITH hits AS (
    (SELECT m.id, m.message_id FROM ordo.messages m
     WHERE (m.message_id COLLATE "C", m.id) > ($10 COLLATE "C", $11) AND m.message_id COLLATE "C" < $1 || U&'\+10FFFF'
       AND` + adminSearchFilters + `
     ORDER BY m.message_id COLLATE "C", m.id LIMIT $7)
    UNION
    (SELECT m.id, m.message_id FROM ordo.tenants ct
     JOIN LATERAL (SELECT c.id FROM ordo.conversations c WHERE c.tenant_id = ct.id AND c.conversation_id = $1) c ON true
     JOIN ordo.messages m ON m.conversation_pk = c.id
     WHERE ($2 = '' OR ct.slug = $2)
       AND (m.message_id COLLATE "C", m.id) > ($8 COLLATE "C", $9) AND` + adminSearchFilters + `
     ORDER BY m.message_id COLLATE "C", m.id LIMIT $7)
    UNION
    (SELECT m.id, m.message_id FROM ordo.steps st JOIN ordo.messages m ON m.id = st.message_pk
     WHERE st.provider_message_id = $1
       AND (m.message_id COLLATE "C", m.id) > ($8 COLLATE "C", $9) AND` + adminSearchFilters + `
     LIMIT $7)
)` + adminFoundColumns + `
FROM hits h
JOIN ordo.messages m ON m.id = h.id
JOIN ordo.tenants t ON t.id = m.tenant_id
JOIN ordo.conversations c ON c.id = m.conversation_pk
ORDER BY m.message_id COLLATE "C", m.id LIMIT $7`

// Without a Q: the newest messages that pass the filters, from the cursor.
const adminSearchRecent = adminFoundColumns + `
FROM ordo.messages m
JOIN ordo.tenants t ON t.id = m.tenant_id
JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE $1 = '' AND ($9 = 0 OR m.id < $9) AND $8 = '' AND $10 = '' AND $11 = 0 AND` + adminSearchFilters + `
ORDER BY m.id DESC LIMIT $7`

// AdminMessagePage is one page of a search; Next is the Cursor of the next.
type AdminMessagePage struct {
	Items []AdminFoundMessage `json:"items"`
	Next  string              `json:"next,omitempty"`
}

// AdminSearchMessages finds messages across tenants: by Q in message id
// order, else newest first; keyset pages.
func (e *Engine) AdminSearchMessages(ctx context.Context, s AdminSearch) (AdminMessagePage, error) {
	if err := s.validate(); err != nil {
		return AdminMessagePage{}, err
	}
	cur, err := decodeCursor(s.Cursor)
	if err != nil {
		return AdminMessagePage{}, err
	}
	q, from := adminSearchRecent, searchCursor{}
	if s.Q != "" {
		q, from = adminSearchByQ, cur
		if from.MessageID < s.Q {
			from = searchCursor{MessageID: s.Q}
		}
	} else {
		cur.MessageID = ""
	}
	p := AdminMessagePage{Items: []AdminFoundMessage{}}
	err = e.adminRead(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, q, s.Q, s.Tenant, s.Status, s.Direction, s.Since, s.Until, s.Limit+1, cur.MessageID, cur.PK, from.MessageID, from.PK)
		items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AdminFoundMessage])
		if err != nil {
			return err
		}
		if len(items) > s.Limit {
			items = items[:s.Limit]
			last := items[len(items)-1]
			next := searchCursor{PK: last.PK}
			if s.Q != "" {
				next.MessageID = last.MessageID
			}
			p.Next = next.encode()
		}
		p.Items = items
		return nil
	})
	if err != nil {
		return AdminMessagePage{}, translate(err, "search messages")
	}
	return p, nil
}

// Timeline is a conversation as the admin page explains it.
type Timeline struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	HeadSeq        int64      `json:"head_seq"`
	LastSeq        int64      `json:"last_seq"`
	Fence          int64      `json:"fence"`
	HaltedAt       *time.Time `json:"halted_at"`
	PausedWait     bool       `json:"paused_wait"`
	CreatedAt      time.Time  `json:"created_at"`
	// Drain is the conversation's ready row (nil: nothing to run).
	Drain *TimelineDrain `json:"drain"`
	// Messages are in seq order after AfterSeq; Next is the AfterSeq of
	// the next page (0 at the end).
	AfterSeq int64             `json:"after_seq"`
	Messages []TimelineMessage `json:"messages"`
	Next     int64             `json:"next,omitempty"`
}

// TimelineDrain is the ordo.ready row that holds a conversation's drain.
type TimelineDrain struct {
	DueAt   time.Time `json:"due_at"`
	Running bool      `json:"running"`
	Woken   bool      `json:"woken"`
	// Urgent: a user waits on the conversation (its last message in is the
	// user's, or answers it): its claims and paced sends go first.
	Urgent bool `json:"urgent"`
}

// TimelineMessage is one message with its steps and dead letters.
type TimelineMessage struct {
	PK          int64                `json:"-"`
	MessageID   string               `json:"message_id"`
	Seq         int64                `json:"seq"`
	Direction   string               `json:"direction"`
	Status      string               `json:"status"`
	CreatedAt   time.Time            `json:"created_at"`
	FinishedAt  *time.Time           `json:"finished_at"`
	Pruned      bool                 `json:"pruned"`
	Steps       []TimelineStep       `json:"steps"`
	DeadLetters []TimelineDeadLetter `json:"dead_letters"`
}

// TimelineStep is a step (handle: the handler call; send: one reply) with
// every failed attempt in Errors ([{"attempt","at","error",…}]).
type TimelineStep struct {
	MessagePK         int64           `json:"-"`
	ID                int64           `json:"id"`
	Idx               int             `json:"idx"`
	Kind              string          `json:"kind"`
	Status            string          `json:"status"`
	Attempts          int             `json:"attempts"`
	Errors            json.RawMessage `json:"errors"`
	ProviderMessageID string          `json:"provider_message_id"`
	ProviderStatus    string          `json:"provider_status"`
	ProviderStatusAt  *time.Time      `json:"provider_status_at"`
	AmbiguousCount    int             `json:"ambiguous_count"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
	// RepliesDueAt is until when a waiting handle step (an async handler)
	// waits for its replies.
	RepliesDueAt *time.Time `json:"replies_due_at"`
	// Sandbox: the send went to ordo dev's sandbox, not to WhatsApp.
	Sandbox bool `json:"sandbox" db:"-"`
}

// TimelineDeadLetter is a dead letter of a timeline's message.
type TimelineDeadLetter struct {
	MessagePK  int64      `json:"-"`
	ID         string     `json:"id"`
	Reason     string     `json:"reason"`
	CreatedAt  time.Time  `json:"created_at"`
	ResolvedAt *time.Time `json:"resolved_at"`
	Resolution string     `json:"resolution"`
}

const timelineConversation = `
SELECT c.id, t.slug, c.conversation_id, c.head_seq, c.last_seq, c.fence, c.halted_at, c.paused_wait, c.created_at,
       r.due_at, coalesce(r.running, false), coalesce(r.woken, false), coalesce(r.urgent, false)
FROM ordo.tenants t
JOIN ordo.conversations c ON c.tenant_id = t.id AND c.conversation_id = $2
LEFT JOIN ordo.ready r ON r.conversation_pk = c.id
WHERE t.slug = $1`

const timelineMessages = `
SELECT m.id, m.message_id, m.seq, m.direction, m.status, m.created_at, m.finished_at, m.payload IS NULL
FROM ordo.messages m WHERE m.conversation_pk = $1 AND m.seq > $2
ORDER BY m.seq LIMIT $3`

const timelineSteps = `
SELECT s.message_pk, s.id, s.idx, s.kind, s.status, s.attempts, s.errors, coalesce(s.provider_message_id, ''),
       coalesce(s.provider_status, ''), s.provider_status_at, s.ambiguous_count, s.started_at, s.finished_at, s.replies_due_at
FROM ordo.steps s WHERE s.message_pk = ANY($1)
ORDER BY s.message_pk, s.idx`

const timelineDeadLetters = `
SELECT d.message_pk, d.id::text, d.reason, d.created_at, d.resolved_at, coalesce(d.resolution, '')
FROM ordo.dead_letters d WHERE d.message_pk = ANY($1)
ORDER BY d.id`

// Timeline pages.
const (
	// TimelinePageSize is how many messages one timeline page holds.
	TimelinePageSize = 100
	// TimelineBeforeHead is how many finished messages a timeline opened
	// at the head shows before it: the context of what is stuck.
	TimelineBeforeHead = 5
)

// AdminTimeline reads a conversation of the tenant with slug, its messages
// from afterSeq on (a negative afterSeq: from TimelineBeforeHead messages
// before the head, where a stuck conversation is stuck), in one snapshot.
func (e *Engine) AdminTimeline(ctx context.Context, slug, conversationID string, afterSeq int64) (Timeline, error) {
	if slug == "" {
		return Timeline{}, Errorf(CodeInvalid, "tenant: required")
	}
	if conversationID == "" {
		return Timeline{}, Errorf(CodeInvalid, "conversation_id: required")
	}
	var tl Timeline
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		var (
			pk      int64
			dueAt   *time.Time
			running bool
			woken   bool
			urgent  bool
		)
		err := tx.QueryRow(ctx, timelineConversation, slug, conversationID).Scan(&pk, &tl.Tenant, &tl.ConversationID,
			&tl.HeadSeq, &tl.LastSeq, &tl.Fence, &tl.HaltedAt, &tl.PausedWait, &tl.CreatedAt, &dueAt, &running, &woken, &urgent)
		if err == pgx.ErrNoRows {
			return Errorf(CodeNotFound, "conversation not found")
		}
		if err != nil {
			return err
		}
		if dueAt != nil {
			tl.Drain = &TimelineDrain{DueAt: *dueAt, Running: running, Woken: woken, Urgent: urgent}
		}
		if afterSeq < 0 {
			afterSeq = max(0, tl.HeadSeq-TimelineBeforeHead)
		}
		tl.AfterSeq = afterSeq
		rows, _ := tx.Query(ctx, timelineMessages, pk, afterSeq, TimelinePageSize+1)
		msgs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[timelineMessageRow])
		if err != nil {
			return err
		}
		if len(msgs) > TimelinePageSize {
			msgs = msgs[:TimelinePageSize]
			tl.Next = msgs[len(msgs)-1].Seq
		}
		pks := make([]int64, len(msgs))
		byPK := make(map[int64]int, len(msgs))
		tl.Messages = make([]TimelineMessage, len(msgs))
		for i, m := range msgs {
			pks[i], byPK[m.PK] = m.PK, i
			tl.Messages[i] = TimelineMessage{PK: m.PK, MessageID: m.MessageID, Seq: m.Seq, Direction: m.Direction, Status: m.Status,
				CreatedAt: m.CreatedAt, FinishedAt: m.FinishedAt, Pruned: m.Pruned, Steps: []TimelineStep{}, DeadLetters: []TimelineDeadLetter{}}
		}
		rows, _ = tx.Query(ctx, timelineSteps, pks)
		steps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TimelineStep])
		if err != nil {
			return err
		}
		for _, s := range steps {
			s.Sandbox = IsSandboxWAMID(s.ProviderMessageID)
			m := &tl.Messages[byPK[s.MessagePK]]
			m.Steps = append(m.Steps, s)
		}
		rows, _ = tx.Query(ctx, timelineDeadLetters, pks)
		dls, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TimelineDeadLetter])
		if err != nil {
			return err
		}
		for _, d := range dls {
			m := &tl.Messages[byPK[d.MessagePK]]
			m.DeadLetters = append(m.DeadLetters, d)
		}
		return nil
	})
	if err != nil {
		return Timeline{}, translate(err, "read timeline")
	}
	return tl, nil
}

type timelineMessageRow struct {
	PK         int64
	MessageID  string
	Seq        int64
	Direction  string
	Status     string
	CreatedAt  time.Time
	FinishedAt *time.Time
	Pruned     bool
}
