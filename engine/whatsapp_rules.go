package engine

// WhatsApp's own rules, as the engine keeps them (issue 26; the contract is
// jobs/whatsapp/README.md): what a webhook delivery teaches ordo about a
// conversation's service window, the inbound media ids a tenant may fetch,
// the read receipts to send, and what Meta bills (usage).

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// noteInboundQuery records, for a new inbound message of a delivery ($1
// tenant, $2 conversation, $4 the message's row): the user's latest
// WhatsApp timestamp on the conversation ($3; it only moves forward), a
// read receipt to send when the tenant has mark_read, and its media id
// ($5, $6; none when empty). The conversation row and the message row are
// the ones this delivery's ordo.enqueue_message just locked and inserted
// (sql/LOCKING.md: conversation, then message); a media row waits for
// nobody.
const noteInboundQuery = `
WITH c AS (
    UPDATE ordo.conversations SET last_inbound_at = greatest(last_inbound_at, $3)
    WHERE tenant_id = $1 AND conversation_id = $2
    RETURNING id
), r AS (
    UPDATE ordo.messages SET read_receipt = 'pending'
    WHERE id = $4 AND read_receipt IS NULL AND (SELECT t.mark_read FROM ordo.tenants t WHERE t.id = $1)
    RETURNING id
), md AS (
    INSERT INTO ordo.media (tenant_id, media_id, mime_type, message_id)
    SELECT $1, $5, $6, $7 WHERE $5 <> ''
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM c)`

// noteInbound is noteInboundQuery for m, stored as message row id. A
// message Meta sent without a timestamp counts as written now.
func noteInbound(ctx context.Context, tx pgx.Tx, tenantID int64, m whatsapp.Inbound, id string) error {
	at := m.Timestamp
	if at.IsZero() {
		at = time.Now()
	}
	var n int64
	if err := tx.QueryRow(ctx, noteInboundQuery, tenantID, m.ConversationID, at, id, m.MediaID, m.MediaMIME, m.MessageID).Scan(&n); err != nil {
		return fmt.Errorf("note inbound message: %w", err)
	}
	return nil
}

// mediaURL is where a tenant's handler fetches an inbound message's media
// through ordo: base (the scheme and host Meta's webhook reached) and the
// media endpoint; "" when there is no base.
func mediaURL(base, mediaID string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/v1/media/" + url.PathEscape(mediaID)
}

// recordUsageQuery records the pricing of a delivery's statuses, once per
// (tenant, wamid): the first status that carries one wins. Rows go in wamid
// order so concurrent deliveries queue rather than deadlock on the key. It
// returns the rows it inserted.
const recordUsageQuery = `
INSERT INTO ordo.usage AS u (tenant_id, wamid, category, billable, pricing_model, at)
SELECT $1, s.wamid, s.category, s.billable, s.model, s.at
FROM unnest($2::text[], $3::text[], $4::bool[], $5::text[], $6::timestamptz[]) AS s(wamid, category, billable, model, at)
ORDER BY s.wamid
ON CONFLICT (tenant_id, wamid) DO NOTHING
RETURNING u.category, u.billable`

// recordUsage stores the pricing of sts and returns how many billable
// messages each category gained.
func recordUsage(ctx context.Context, tx pgx.Tx, tenantID int64, sts []whatsapp.Status) (map[string]int, error) {
	var (
		wamids, cats, models []string
		billable             []bool
		ats                  []time.Time
		seen                 = map[string]bool{}
	)
	for _, st := range sts {
		if st.Pricing == nil || seen[st.MessageID] {
			continue
		}
		seen[st.MessageID] = true
		at := st.Timestamp
		if at.IsZero() {
			at = time.Now()
		}
		wamids, cats, models = append(wamids, st.MessageID), append(cats, st.Pricing.Category), append(models, st.Pricing.PricingModel)
		billable, ats = append(billable, st.Pricing.Billable), append(ats, at)
	}
	if len(wamids) == 0 {
		return nil, nil
	}
	rows, _ := tx.Query(ctx, recordUsageQuery, tenantID, wamids, cats, billable, models, ats)
	added := map[string]int{}
	var (
		cat string
		b   bool
	)
	_, err := pgx.ForEachRow(rows, []any{&cat, &b}, func() error {
		if b {
			added[cat]++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record usage: %w", err)
	}
	return added, nil
}

// Usage is what Meta billed a tenant for in a period, by pricing category.
type Usage struct {
	Since      time.Time                `json:"since"`
	Until      time.Time                `json:"until"`
	Categories map[string]UsageCategory `json:"categories"`
}

// UsageCategory counts a category's messages: billable and not.
type UsageCategory struct {
	Billable    int64 `json:"billable"`
	NonBillable int64 `json:"non_billable"`
}

const usageQuery = `
SELECT category, count(*) FILTER (WHERE billable), count(*) FILTER (WHERE NOT billable)
FROM ordo.usage WHERE tenant_id = $1 AND at >= $2 AND at < $3
GROUP BY category ORDER BY category`

// Usage counts tenant's sent messages by pricing category, those whose
// first priced status is stamped in [since, until).
func (e *Engine) Usage(ctx context.Context, tenantID int64, since, until time.Time) (Usage, error) {
	u := Usage{Since: since.UTC(), Until: until.UTC(), Categories: map[string]UsageCategory{}}
	rows, _ := e.pool.Query(ctx, usageQuery, tenantID, since, until)
	var (
		cat  string
		b, n int64
	)
	_, err := pgx.ForEachRow(rows, []any{&cat, &b, &n}, func() error {
		u.Categories[cat] = UsageCategory{Billable: b, NonBillable: n}
		return nil
	})
	if err != nil {
		return Usage{}, translate(err, "read usage")
	}
	return u, nil
}

// MonthOf is the calendar month (UTC) holding t: [start, next start).
func MonthOf(t time.Time) (since, until time.Time) {
	t = t.UTC()
	since = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return since, since.AddDate(0, 1, 0)
}

const mediaSeenQuery = `SELECT mime_type FROM ordo.media WHERE tenant_id = $1 AND media_id = $2`

// MediaSeen returns the mime type of media id mediaID as seen in tenant's
// inbound messages; CodeNotFound when it was never seen for this tenant
// (another tenant's id included).
func (e *Engine) MediaSeen(ctx context.Context, tenantID int64, mediaID string) (string, error) {
	var mime string
	if err := e.pool.QueryRow(ctx, mediaSeenQuery, tenantID, mediaID).Scan(&mime); err != nil {
		if ErrorCode(translate(err, "")) == CodeNotFound {
			return "", Errorf(CodeNotFound, "media_id: not found in this tenant's inbound messages")
		}
		return "", translate(err, "read media")
	}
	return mime, nil
}

// sortedCategories is m's keys in order (for logs and tests).
func sortedCategories(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
