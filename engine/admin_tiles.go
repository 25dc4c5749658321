package engine

// The admin page's live tiles, per tenant and overall: accepted and sent per
// minute and accept→send p50/p99 over the last TilesWindow, the backlog,
// the oldest unfinished message and the open dead letters. Every query is
// bounded: the rates read only the newest TilesScanRows messages and steps
// (by primary key), the backlog only the conversations with work (the ready
// set and those halted on an open dead letter).

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds of the tiles.
const (
	// TilesWindow is the span the rates and latencies cover.
	TilesWindow = 15 * time.Minute
	// TilesScanRows caps the messages and the steps read for the rates:
	// past it the rates are lower bounds (Tile.Capped).
	TilesScanRows = 50000
)

// Tile is one tenant's numbers, or everyone's (Tenant "").
type Tile struct {
	Tenant            string     `json:"tenant"`
	AcceptedPerMinute float64    `json:"accepted_per_minute"`
	SentPerMinute     float64    `json:"sent_per_minute"`
	AcceptToSendP50MS *float64   `json:"accept_to_send_p50_ms"`
	AcceptToSendP99MS *float64   `json:"accept_to_send_p99_ms"`
	Backlog           int64      `json:"backlog"`
	OldestUnfinished  *time.Time `json:"oldest_unfinished"`
	OpenDeadLetters   int64      `json:"open_dead_letters"`
}

// Tiles is the tiles with what they cover.
type Tiles struct {
	At      time.Time `json:"at"`
	WindowS int       `json:"window_s"`
	// Capped says the scan stopped at TilesScanRows before the window's
	// start: the rates count less than happened.
	Capped  bool   `json:"capped"`
	Overall Tile   `json:"overall"`
	Tenants []Tile `json:"tenants"`
}

// One statement, grouped by tenant with a grand total (tenant_id NULL).
const tilesQuery = `
WITH win AS (SELECT now() - make_interval(secs => $2::double precision) AS since),
recent_m AS (
    SELECT m.id, m.tenant_id, m.created_at FROM ordo.messages m ORDER BY m.id DESC LIMIT $1
), accepted AS (
    SELECT tenant_id, count(*) AS n FROM recent_m, win WHERE created_at >= win.since GROUP BY tenant_id
), recent_s AS (
    SELECT s.id, s.message_pk, s.idx, s.kind, s.status, s.finished_at FROM ordo.steps s ORDER BY s.id DESC LIMIT $1
), sent AS (
    SELECT m.tenant_id, s.finished_at,
           extract(epoch FROM s.finished_at - m.created_at) * 1000 AS ms,
           NOT EXISTS (SELECT 1 FROM ordo.steps f WHERE f.message_pk = s.message_pk AND f.kind = 'send' AND f.idx < s.idx) AS first
    FROM recent_s s JOIN ordo.messages m ON m.id = s.message_pk, win
    WHERE s.kind = 'send' AND s.status = 'done' AND s.finished_at >= win.since
), active AS (
    SELECT r.conversation_pk AS id FROM ordo.ready r
    UNION
    SELECT m.conversation_pk FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk
    WHERE d.resolved_at IS NULL
), backlog AS (
    SELECT c.tenant_id, sum(c.last_seq - c.head_seq) AS n, min(h.created_at) AS oldest
    FROM active a JOIN ordo.conversations c ON c.id = a.id
    LEFT JOIN LATERAL (SELECT m.created_at FROM ordo.messages m
                       WHERE m.conversation_pk = c.id AND m.seq > c.head_seq ORDER BY m.seq LIMIT 1) h ON true
    WHERE c.last_seq > c.head_seq
    GROUP BY c.tenant_id
), open_dl AS (
    SELECT d.tenant_id, count(*) AS n FROM ordo.dead_letters d WHERE d.resolved_at IS NULL GROUP BY d.tenant_id
), sent_agg AS (
    SELECT GROUPING(tenant_id) AS overall, tenant_id, count(*) AS n,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE first) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE first) AS p99
    FROM sent GROUP BY GROUPING SETS ((tenant_id), ())
)
SELECT true, '', coalesce((SELECT sum(n) FROM accepted), 0)::float8, coalesce(sa.n, 0)::float8, sa.p50, sa.p99,
       coalesce((SELECT sum(n) FROM backlog), 0)::bigint, (SELECT min(oldest) FROM backlog),
       coalesce((SELECT sum(n) FROM open_dl), 0)::bigint
FROM (SELECT 1) one LEFT JOIN sent_agg sa ON sa.overall = 1
UNION ALL
SELECT false, t.slug, coalesce(a.n, 0)::float8, coalesce(sa.n, 0)::float8, sa.p50, sa.p99,
       coalesce(b.n, 0)::bigint, b.oldest, coalesce(o.n, 0)::bigint
FROM (SELECT id, slug FROM ordo.tenants ORDER BY slug LIMIT 1000) t
LEFT JOIN accepted a ON a.tenant_id = t.id
LEFT JOIN sent_agg sa ON sa.overall = 0 AND sa.tenant_id = t.id
LEFT JOIN backlog b ON b.tenant_id = t.id
LEFT JOIN open_dl o ON o.tenant_id = t.id`

type tileRow struct {
	Tile
	overall bool
}

// tilesCapped: is the TilesScanRows-th newest message or step still inside
// the window (so older ones in it were not counted)?
const tilesCapped = `
SELECT coalesce((SELECT created_at FROM ordo.messages ORDER BY id DESC OFFSET $1 - 1 LIMIT 1) >= now() - make_interval(secs => $2::double precision), false)`

// AdminTiles reads the tiles in one snapshot: the overall tile and the
// first 1,000 tenants by slug.
func (e *Engine) AdminTiles(ctx context.Context) (Tiles, error) {
	out := Tiles{WindowS: int(TilesWindow.Seconds()), Tenants: []Tile{}}
	minutes := TilesWindow.Minutes()
	err := e.adminRead(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&out.At); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, tilesQuery, TilesScanRows, TilesWindow.Seconds())
		tiles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tileRow, error) {
			var t tileRow
			err := r.Scan(&t.overall, &t.Tenant, &t.AcceptedPerMinute, &t.SentPerMinute, &t.AcceptToSendP50MS,
				&t.AcceptToSendP99MS, &t.Backlog, &t.OldestUnfinished, &t.OpenDeadLetters)
			return t, err
		})
		if err != nil {
			return err
		}
		for _, t := range tiles {
			t.AcceptedPerMinute /= minutes
			t.SentPerMinute /= minutes
			if t.overall {
				out.Overall = t.Tile
				continue
			}
			out.Tenants = append(out.Tenants, t.Tile)
		}
		slices.SortFunc(out.Tenants, func(a, b Tile) int { return strings.Compare(a.Tenant, b.Tenant) })
		return tx.QueryRow(ctx, tilesCapped, TilesScanRows, TilesWindow.Seconds()).Scan(&out.Capped)
	})
	if err != nil {
		return Tiles{}, translate(err, "read tiles")
	}
	return out, nil
}
