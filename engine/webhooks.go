package engine

// Storage of Meta's WhatsApp webhooks. Meta redelivers anything not answered
// 200 (for up to 7 days) and sends duplicates anyway, so a delivery is
// answered 200 only once every message and status of it is committed, and
// a repeat delivery dedupes on the messages' UNIQUE (tenant, message_id).
//
// Lock order of a delivery (sql/LOCKING.md, the same as a drain's):
// conversations first, in sorted order, each one's messages in their
// user's order (ordo.enqueue_messages), then the send steps its statuses
// touch, in id order, then their messages. A delivery holds several
// conversations at once, so it never waits for one while it holds another
// (batch.go, enqueueGroupQuery): an application's transaction may hold them in any
// order (ordo.enqueue_message), and a delivery that held a and waited for
// c while the application held c and asked for a was a lock cycle in
// which a deadlock check cancelled the application or a third transaction
// (TestWhatsAppDeliveryHoldsNoConversationWhileItWaits). The delivery's
// transaction waits only for its first conversation's row, before it holds
// any, and only tries each later one; the statuses and every conversation
// it got commit together. A conversation another transaction held is
// committed next, in a transaction of its own that waits for that row
// alone, its messages together and in order. Lock waits are bounded
// (LockTimeout): a conversation held longer by an application's long
// transaction leaves the delivery answered 503 with that conversation's
// messages not stored and the others committed; Meta's redelivery stores
// the rest and finds the others duplicates. Each conversation's messages
// are stored all or none, so its order holds across a redelivery.
//
// The statuses' wait for a step row, holding the delivery's conversations,
// is no cycle (sql/LOCKING.md, "A webhook delivery"): whoever holds a step
// took its conversation's row first, so not one the delivery holds, or
// holds no conversation, and nobody takes a conversation row after a step
// that it did not hold before.
//
// A failed status (Meta took a send and could not deliver it) is recorded
// on the step with its reason and class, like an error answered at once.
// While the step is still in doubt, its drain settles it from there (resend,
// dead letter or pause: jobs/steps.go settleFailed). When the step was done
// already — the conversation has moved on, later messages may have gone out
// — the message is dead-lettered (status dead, the step failed), whatever
// the reason, and the conversation is not halted: the order it could have
// kept is already past. An operator's replay sends it again at the tail.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// webhookTxAttempts bounds how often a webhook's transaction is retried when
// Postgres aborted it to break a deadlock with a concurrent delivery.
const webhookTxAttempts = 3

// WebhookTenant is the tenant a webhook delivery was addressed to, as the
// web layer resolved it from the path and authenticated it by signature.
type WebhookTenant struct {
	ID   int64
	Slug string
	// PhoneNumberID is the business number of the tenant's whatsapp
	// credential: a delivery for any other number is refused.
	PhoneNumberID string
	// PublicBase is ordo's scheme and host as Meta reached it
	// ("https://ordo.example.com"): an inbound media message's payload gets
	// its media_url there. Empty: no media_url.
	PublicBase string
}

// WebhookResult is the answer to a stored webhook; Meta ignores it, people
// reading logs or tests do not.
type WebhookResult struct {
	// Accepted counts the new inbound messages, Duplicates the repeats.
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	// Statuses counts the statuses that updated a send step; the others were
	// for unknown steps or older than what the step has.
	Statuses int `json:"statuses"`
}

// StoreWebhook writes an authenticated delivery: its statuses and the
// messages of every conversation it can take without waiting while it
// holds another in one transaction, each conversation another
// transaction held in one of its own afterwards (the header above). Each
// transaction is retried when Postgres breaks a deadlock between
// concurrent deliveries. nil means all of them committed; an error means
// Meta must redeliver, and each conversation's messages are stored all
// or none. A delivery that carries anything for a business number other
// than the tenant's is refused whole (CodeInvalid): a Meta app may serve
// several numbers, and ordo must not answer one number's users from
// another.
func (e *Engine) StoreWebhook(ctx context.Context, t WebhookTenant, wh whatsapp.Webhook) (WebhookResult, error) {
	if err := checkNumber(wh, t.PhoneNumberID); err != nil {
		e.logger.InfoContext(ctx, "whatsapp webhook refused", slog.String("tenant", t.Slug), slog.String("error", err.Error()))
		return WebhookResult{}, err
	}
	if len(wh.Messages) == 0 && len(wh.Statuses) == 0 {
		return WebhookResult{}, nil
	}
	groups := inboundGroups(wh.Messages)
	statuses := newStatusBatch(wh.Statuses)
	var left [][]whatsapp.Inbound // conversations another transaction held
	res, err := e.webhookTx(ctx, t.Slug, func(tx pgx.Tx, d *delivered) error {
		left = left[:0]
		// Conversations first (the messages), then steps (the statuses).
		for g, group := range groups {
			stored, err := e.storeInbound(ctx, tx, t, group, g == 0, d)
			if err != nil {
				return err
			}
			if !stored {
				left = append(left, group)
			}
		}
		if len(wh.Statuses) > 0 {
			n, err := e.applyStatuses(ctx, tx, t.ID, statuses)
			if err != nil {
				return err
			}
			d.Statuses = n
			if d.billed, err = recordUsage(ctx, tx, t.ID, wh.Statuses); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || len(left) == 0 {
		return res, err
	}
	// Each in a transaction of its own that holds nothing while it waits
	// (at most fallbackParallel of them at once, with REST's), all before
	// the answer: 200 only once every message is committed.
	results := make([]WebhookResult, len(left))
	errs := make([]error, len(left))
	var wg sync.WaitGroup
	for i, group := range left {
		wg.Go(func() {
			e.fallbackSem <- struct{}{}
			defer func() { <-e.fallbackSem }()
			results[i], errs[i] = e.webhookTx(ctx, t.Slug, func(tx pgx.Tx, d *delivered) error {
				_, err := e.storeInbound(ctx, tx, t, group, true, d)
				return err
			})
		})
	}
	wg.Wait()
	for i := range left {
		res.Accepted += results[i].Accepted
		res.Duplicates += results[i].Duplicates
		if err == nil {
			err = errs[i] // the first conversation's, in the lock order
		}
	}
	return res, err
}

// delivered is what one of a delivery's transactions wrote.
type delivered struct {
	WebhookResult
	billed map[string]int // new billable messages by category
}

// webhookTx runs fn in one transaction (writeTx: lock waits bounded by
// LockTimeout, committed durably), again with a fresh delivered when
// Postgres aborted it to break a deadlock or a serialization conflict,
// and counts what the committed one wrote in the metrics.
func (e *Engine) webhookTx(ctx context.Context, tenant string, fn func(tx pgx.Tx, d *delivered) error) (WebhookResult, error) {
	for attempt := 1; ; attempt++ {
		var d delivered
		err := e.writeTx(ctx, func(tx pgx.Tx) error { return fn(tx, &d) })
		if err == nil {
			for _, cat := range sortedCategories(d.billed) {
				e.metrics.Billable(tenant, cat, d.billed[cat])
			}
			// Counted once committed, as REST's are.
			e.metrics.Accepted(metrics.SourceWebhook, "inbound", d.Accepted, d.Duplicates)
			e.metrics.WebhookStatuses(d.Statuses)
			return d.WebhookResult, nil
		}
		if attempt == webhookTxAttempts || !isTxConflict(err) {
			if ErrorCode(err) == CodeInternal {
				err = translate(err, "store webhook")
			}
			return WebhookResult{}, err
		}
	}
}

// inboundGroups sorts a delivery's messages into its conversations, in
// the lock order (sql/LOCKING.md), each one's messages in the order their
// user wrote them (Meta's timestamps; equal ones as delivered).
func inboundGroups(in []whatsapp.Inbound) [][]whatsapp.Inbound {
	msgs := slices.Clone(in)
	slices.SortStableFunc(msgs, func(a, b whatsapp.Inbound) int {
		if c := strings.Compare(a.ConversationID, b.ConversationID); c != 0 {
			return c
		}
		return a.Timestamp.Compare(b.Timestamp)
	})
	var groups [][]whatsapp.Inbound
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].ConversationID == msgs[i].ConversationID {
			j++
		}
		groups = append(groups, msgs[i:j:j])
		i = j
	}
	return groups
}

// storeInbound stores group, one conversation's messages, in tx
// (ordo.enqueue_messages: waiting for the conversation's row when wait,
// else only trying it) and notes each new one (noteInbound: the service
// window, a read receipt to send, the media id), counting them in d. It
// reports false, with nothing stored, when the row was only tried and
// another transaction holds it.
func (e *Engine) storeInbound(ctx context.Context, tx pgx.Tx, t WebhookTenant, group []whatsapp.Inbound, wait bool, d *delivered) (bool, error) {
	var msgs convMessages
	for _, m := range group {
		payload := storable(m.Payload)
		if u := mediaURL(t.PublicBase, m.MediaID); u != "" {
			payload = whatsapp.WithMediaURL(payload, m.Type, u)
		}
		msgs.add(NewMessage{Tenant: t.Slug, ConversationID: m.ConversationID, MessageID: m.MessageID,
			Direction: "inbound", Payload: payload, ReuseIsDuplicate: true})
	}
	q, args := msgs.query(wait) // batch.go
	rows, _ := tx.Query(ctx, q, args...)
	got, err := scanEnqueued(rows, len(group))
	if err != nil {
		return false, translate(err, "enqueue message")
	}
	if len(got) == 0 {
		if wait {
			return false, translate(errors.New("enqueue messages: no answer"), "enqueue message")
		}
		return false, nil
	}
	for i, a := range got {
		if a.duplicate {
			d.Duplicates++
			continue
		}
		d.Accepted++
		if err := noteInbound(ctx, tx, t.ID, group[i], strconv.FormatInt(a.id, 10)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// checkNumber refuses a webhook that carries anything for a business number
// other than phoneNumberID.
func checkNumber(wh whatsapp.Webhook, phoneNumberID string) error {
	check := func(got string) error {
		if got != phoneNumberID {
			return Errorf(CodeInvalid, "phone_number_id: %q is not this tenant's WhatsApp number", got)
		}
		return nil
	}
	for _, m := range wh.Messages {
		if err := check(m.PhoneNumberID); err != nil {
			return err
		}
	}
	for _, st := range wh.Statuses {
		if err := check(st.PhoneNumberID); err != nil {
			return err
		}
	}
	return nil
}

// isTxConflict reports whether Postgres aborted the transaction to break a
// deadlock or a serialization conflict, so running it again can succeed.
func isTxConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// statusBatch is a delivery's statuses as the column arrays applyStatuses
// unnests: one statement for all of them.
type statusBatch struct {
	stepIDs  []*int64
	wamids   []string
	statuses []string
	ranks    []int32
	// failures and classes are a failed status's reason and class
	// (whatsapp.Status.Failure), empty for the others.
	failures []string
	classes  []string
}

func newStatusBatch(sts []whatsapp.Status) statusBatch {
	var b statusBatch
	for _, st := range sts {
		var id *int64
		if n, err := strconv.ParseInt(st.CallbackData, 10, 64); err == nil && n > 0 {
			id = &n
		}
		b.stepIDs = append(b.stepIDs, id)
		b.wamids = append(b.wamids, st.MessageID)
		b.statuses = append(b.statuses, strings.Map(dropControl, st.Status))
		b.ranks = append(b.ranks, int32(whatsapp.StatusRank(st.Status)))
		f, _ := st.Failure()
		b.failures = append(b.failures, strings.Map(dropControl, f.Message))
		class := ""
		if f.Message != "" {
			class = f.Class.String()
		}
		b.classes = append(b.classes, class)
	}
	return b
}

// applyStatuses records a delivery's statuses and dead-letters the done
// messages a failed status says were never delivered; it returns how many
// statuses updated a step.
func (e *Engine) applyStatuses(ctx context.Context, tx pgx.Tx, tenantID int64, b statusBatch) (int, error) {
	rows, _ := tx.Query(ctx, applyStatusesQuery, tenantID, b.stepIDs, b.wamids, b.statuses, b.ranks, b.failures, b.classes)
	type applied struct {
		id      int64
		undone  bool // a failed status on a step that was done
		message string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
		var a applied
		err := r.Scan(&a.id, &a.undone, &a.message)
		return a, err
	})
	if err != nil {
		return 0, fmt.Errorf("apply statuses: %w", err)
	}
	var undone []int64
	for _, a := range got {
		if a.undone {
			undone = append(undone, a.id)
			e.logger.WarnContext(ctx, "a sent message was not delivered; dead-lettered (the conversation has moved on)",
				slog.Int64("step_id", a.id), slog.String("message_id", a.message))
		}
	}
	if len(undone) > 0 {
		if _, err := tx.Exec(ctx, deadLetterUndelivered, undone); err != nil {
			return 0, fmt.Errorf("dead-letter undelivered messages: %w", err)
		}
	}
	return len(got), nil
}

// storable makes a message's JSON fit a jsonb column. Postgres refuses the
// escapes \u0000 and lone surrogates that JSON (and so an end user's text)
// may carry; refusing the delivery for them would have Meta redeliver it,
// with every other message in it, for days. So such a payload is decoded and
// encoded again, NULs becoming U+FFFD (as lone surrogates do in decoding).
func storable(payload json.RawMessage) json.RawMessage {
	if !bytes.Contains(payload, []byte(`\u`)) {
		return payload
	}
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return payload // the parser read it; leave it to ingest to judge
	}
	out, err := json.Marshal(withoutNUL(v))
	if err != nil {
		return payload
	}
	return out
}

// withoutNUL replaces NUL in every string (and key) of a decoded JSON value.
func withoutNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case []any:
		for i := range x {
			x[i] = withoutNUL(x[i])
		}
	case map[string]any:
		clean := make(map[string]any, len(x))
		for k, e := range x {
			clean[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(e)
		}
		return clean
	}
	return v
}

// dropControl removes control characters (NUL above all, which text columns
// refuse) from a status name.
func dropControl(r rune) rune {
	if unicode.IsControl(r) {
		return -1
	}
	return r
}

// applyStatusesQuery records delivery statuses on the tenant's send steps.
// A status finds its step by biz_opaque_callback_data (ordo's step id), else
// by the wamid; a step of another tenant is never matched, an unknown one is
// skipped. It never regresses a step: a status applies only when it ranks
// above the recorded one (whatsapp.StatusRank), the highest of a delivery
// winning. The wamid fills provider_message_id when the step has none (a
// send whose answer was lost), which is what settles an ambiguous send; a
// failed status appends its reason and class ($6, $7) to the step's error
// history. Steps are locked in id order (sql/LOCKING.md). It returns each
// updated step, whether it is a failed status on a step that was done, and
// its message's id.
const applyStatusesQuery = `
WITH s AS (
    SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])
        WITH ORDINALITY AS s(step_id, wamid, status, rank, failure, class, ord)
), by_id AS (
    SELECT s.ord, st.id FROM s
    JOIN ordo.steps st ON st.id = s.step_id AND st.kind = 'send'
    JOIN ordo.messages m ON m.id = st.message_pk AND m.tenant_id = $1
), by_wamid AS (
    SELECT s.ord, st.id FROM s
    JOIN ordo.steps st ON st.provider_message_id = s.wamid AND st.kind = 'send'
    JOIN ordo.messages m ON m.id = st.message_pk AND m.tenant_id = $1
    WHERE NOT EXISTS (SELECT 1 FROM by_id WHERE by_id.ord = s.ord)
), best AS (
    SELECT DISTINCT ON (h.id) h.id, s.wamid, s.status, s.rank, s.failure, s.class
    FROM (SELECT * FROM by_id UNION ALL SELECT * FROM by_wamid) h JOIN s ON s.ord = h.ord
    ORDER BY h.id, s.rank DESC
), locked AS (
    SELECT st.id FROM ordo.steps st JOIN best ON best.id = st.id ORDER BY st.id FOR UPDATE OF st
)
UPDATE ordo.steps st SET
    provider_status      = best.status,
    provider_status_rank = best.rank,
    provider_status_at   = now(),
    provider_message_id  = coalesce(st.provider_message_id, best.wamid),
    errors               = CASE WHEN best.status = 'failed' THEN st.errors || jsonb_build_array(jsonb_build_object(
                               'attempt', st.attempts, 'at', now(), 'error', best.failure, 'class', best.class, 'source', 'status'))
                           ELSE st.errors END
FROM best JOIN locked ON locked.id = best.id
WHERE st.id = best.id AND best.rank > st.provider_status_rank
RETURNING st.id, best.status = 'failed' AND st.status = 'done',
    (SELECT m.message_id FROM ordo.messages m WHERE m.id = st.message_pk)`

// deadLetterUndelivered dead-letters the messages of done send steps ($1)
// a failed status said were never delivered.
const deadLetterUndelivered = `SELECT ordo.dead_letter_undelivered($1)`
