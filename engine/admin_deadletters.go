package engine

// Dead letters as the admin page filters them (tenant, reason, age), with a
// count preview, and the bulk replay or skip of everything a filter selects.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds of the admin page's dead-letter operations.
const (
	// AdminCountCap is where the preview stops counting ("10000+").
	AdminCountCap = 10000
	// BulkMax is the most dead letters one bulk request resolves; the page
	// repeats the request for more.
	BulkMax = 1000
	// adminStatementTimeout bounds each admin read.
	adminStatementTimeout = "5s"
)

// AdminDeadLetterFilter selects dead letters on the admin page.
type AdminDeadLetterFilter struct {
	Tenant string        // slug; empty: every tenant
	Reason string        // a substring of the reason or last error, any case; empty: any
	MinAge time.Duration // older than this; 0: any age
	State  string        // open (default), resolved, all
	After  int64         // ids above this (keyset)
	Limit  int           // 1..500; 0 means 100
}

func (f *AdminDeadLetterFilter) validate() error {
	if f.State == "" {
		f.State = "open"
	}
	if f.State != "open" && f.State != "resolved" && f.State != "all" {
		return Errorf(CodeInvalid, "state: must be open, resolved or all")
	}
	if len(f.Reason) > 200 {
		return Errorf(CodeInvalid, "reason: must be at most 200 characters")
	}
	if f.MinAge < 0 {
		return Errorf(CodeInvalid, "min_age: must not be negative")
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 500 {
		return Errorf(CodeInvalid, "limit: must be 1 to 500")
	}
	return nil
}

// The filter's WHERE clause, shared by the listing, the count and the bulk
// selection so the preview counts exactly what a bulk action takes.
const adminDeadLetterWhere = `
FROM ordo.dead_letters d
JOIN ordo.tenants t ON t.id = d.tenant_id
JOIN ordo.messages m ON m.id = d.message_pk
JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE ($1 = '' OR t.slug = $1)
  AND ($2 = '' OR strpos(lower(d.reason || ' ' || coalesce(d.errors -> -1 ->> 'error', '')), lower($2)) > 0)
  AND d.created_at <= now() - make_interval(secs => $3::double precision)
  AND ($4 = 'all' OR ($4 = 'open') = (d.resolved_at IS NULL))`

const adminDeadLetterList = `
SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
       coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
       coalesce(d.resolution, '')` + adminDeadLetterWhere + `
  AND d.id > $5
ORDER BY d.id LIMIT $6`

const adminDeadLetterCount = `SELECT count(*) FROM (SELECT 1` + adminDeadLetterWhere + ` LIMIT $5) x`

// Per conversation in the lock order (tenant slug, conversation id, bytes),
// and within one in seq order: a bulk replay keeps each conversation's order.
const adminDeadLetterBulk = `
SELECT d.id` + adminDeadLetterWhere + `
ORDER BY t.slug COLLATE "C", c.conversation_id COLLATE "C", m.seq, d.id
LIMIT $5`

// AdminDeadLetterPage is one page of a filter's dead letters and how many
// it selects in all (up to AdminCountCap; Capped above it).
type AdminDeadLetterPage struct {
	Items  []AdminDeadLetter `json:"items"`
	Total  int64             `json:"total"`
	Capped bool              `json:"capped"`
	// Next is the After of the next page; 0 at the end.
	Next int64 `json:"next,omitempty"`
}

// AdminDeadLetters lists a filter's dead letters, oldest first, with the
// count of all it selects.
func (e *Engine) AdminDeadLetters(ctx context.Context, f AdminDeadLetterFilter) (AdminDeadLetterPage, error) {
	if err := f.validate(); err != nil {
		return AdminDeadLetterPage{}, err
	}
	var p AdminDeadLetterPage
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		args := []any{f.Tenant, f.Reason, f.MinAge.Seconds(), f.State}
		rows, _ := tx.Query(ctx, adminDeadLetterList, append(args, f.After, f.Limit+1)...)
		items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AdminDeadLetter])
		if err != nil {
			return err
		}
		if len(items) > f.Limit {
			items = items[:f.Limit]
			p.Next = parseID(items[len(items)-1].ID)
		}
		p.Items = items
		if err := tx.QueryRow(ctx, adminDeadLetterCount, append(args, AdminCountCap+1)...).Scan(&p.Total); err != nil {
			return err
		}
		if p.Total > AdminCountCap {
			p.Total, p.Capped = AdminCountCap, true
		}
		return nil
	})
	if err != nil {
		return AdminDeadLetterPage{}, translate(err, "list dead letters")
	}
	return p, nil
}

// BulkResult is what a bulk replay or skip did.
type BulkResult struct {
	Action   string `json:"action"`
	Selected int    `json:"selected"`
	Resolved int    `json:"resolved"`
	// Conflicts were resolved by someone else meanwhile.
	Conflicts int `json:"conflicts"`
	// More is true when the filter selects more than BulkMax: repeat.
	More bool `json:"more"`
}

// BulkResolve replays (action "replay") or skips ("skip") the open dead
// letters the filter selects, at most BulkMax: conversation by
// conversation, each one's in seq order, each through the one-row path
// (Replay, Skip), audited there with the filter. A summary entry follows.
func (e *Engine) BulkResolve(ctx context.Context, f AdminDeadLetterFilter, action, actor string) (BulkResult, error) {
	f.State, f.Limit = "open", 1
	if err := f.validate(); err != nil {
		return BulkResult{}, err
	}
	resolution := map[string]string{"replay": "replayed", "skip": "skipped"}[action]
	if resolution == "" {
		return BulkResult{}, Errorf(CodeInvalid, "action: must be replay or skip")
	}
	var ids []int64
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, adminDeadLetterBulk, f.Tenant, f.Reason, f.MinAge.Seconds(), f.State, BulkMax+1)
		var err error
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return BulkResult{}, translate(err, "select dead letters")
	}
	r := BulkResult{Action: action}
	if len(ids) > BulkMax {
		ids, r.More = ids[:BulkMax], true
	}
	r.Selected = len(ids)
	filter := map[string]any{"tenant": f.Tenant, "reason": f.Reason, "min_age_s": int64(f.MinAge.Seconds())}
	details, _ := json.Marshal(map[string]any{"bulk": true, "filter": filter})
	for _, id := range ids {
		_, err := e.resolve(ctx, 0, formatID(id), resolution, actor, details)
		switch {
		case err == nil:
			r.Resolved++
		case ErrorCode(err) == CodeConflict || ErrorCode(err) == CodeNotFound:
			r.Conflicts++
		default:
			return r, err
		}
	}
	summary, _ := json.Marshal(map[string]any{"filter": filter, "selected": r.Selected, "resolved": r.Resolved, "conflicts": r.Conflicts})
	err = e.Tx(ctx, func(tx pgx.Tx) error {
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: "dead_letters.bulk_" + action, Tenant: f.Tenant, Details: summary})
	})
	if err != nil {
		return r, translate(err, "audit bulk "+action)
	}
	return r, nil
}

// adminRead runs f in a read-only snapshot whose statements are bounded
// by adminStatementTimeout: a search on a busy database gives up rather
// than load it.
func (e *Engine) adminRead(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setStatementTimeout, adminStatementTimeout); err != nil {
			return err
		}
		return f(tx)
	})
}

const setStatementTimeout = `SELECT set_config('statement_timeout', $1, true)`

// adminReadBatch is adminRead in one round trip: the transaction's begin,
// its statement timeout, the statements queue adds and the commit go as
// one batch, and read reads queue's results in order. A page that refreshes
// every few seconds on a busy machine waits for the database's scheduler
// once, not once per statement.
func (e *Engine) adminReadBatch(ctx context.Context, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	b.Queue(setStatementTimeout, adminStatementTimeout)
	queue(b)
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = read(br)
	}
	if err == nil {
		_, err = br.Exec()
	}
	err = errors.Join(err, br.Close())
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
		// Never hand the pool a connection inside a transaction.
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), `ROLLBACK`); rerr != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}
	return err
}

func parseID(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func formatID(n int64) string { return strconv.FormatInt(n, 10) }
