package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/metrics"
)

// tenantStatsQuery reads, per tenant that has any, the backlog, the oldest
// head of a conversation with work, the halted conversations, the open dead
// letters and whether its sending is paused. It is bounded by the work
// outstanding, never by history: the conversations with work are the ready
// set (one row per conversation expecting a drain) and the halted ones,
// found through the open dead letters that halted them; each adds one
// primary-key probe and one (conversation_pk, seq) probe for its head
// message. Only the dead-letters table is scanned, and resolved dead letters
// go with their message's retention (and ordo.dependencies: at most two
// rows a tenant).
const tenantStatsQuery = `
WITH work AS (
    SELECT conversation_pk AS id FROM ordo.ready
    UNION
    SELECT m.conversation_pk FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk
    WHERE d.resolved_at IS NULL
), per_tenant AS (
    SELECT c.tenant_id,
           sum(c.last_seq - c.head_seq) AS backlog,
           min(h.created_at) AS oldest,
           count(*) FILTER (WHERE c.halted_at IS NOT NULL) AS halted
    FROM work JOIN ordo.conversations c ON c.id = work.id
    LEFT JOIN ordo.messages h ON h.conversation_pk = c.id AND h.seq = c.head_seq + 1 AND c.last_seq > c.head_seq
    GROUP BY c.tenant_id
), dead AS (
    SELECT tenant_id, count(*) AS open FROM ordo.dead_letters WHERE resolved_at IS NULL GROUP BY tenant_id
), away AS (
    SELECT tenant_id, bool_or(what = 'handler') AS handler, bool_or(what = 'number') AS number
    FROM ordo.dependencies WHERE down_since IS NOT NULL GROUP BY tenant_id
)
SELECT t.slug, coalesce(p.backlog, 0)::bigint,
       coalesce(extract(epoch FROM clock_timestamp() - p.oldest), 0)::float8,
       coalesce(p.halted, 0), coalesce(d.open, 0), t.sending_paused_at IS NOT NULL,
       coalesce(a.handler, false), coalesce(a.number, false)
FROM ordo.tenants t
LEFT JOIN per_tenant p ON p.tenant_id = t.id
LEFT JOIN dead d ON d.tenant_id = t.id
LEFT JOIN away a ON a.tenant_id = t.id
WHERE p.tenant_id IS NOT NULL OR d.tenant_id IS NOT NULL OR t.sending_paused_at IS NOT NULL
   OR a.tenant_id IS NOT NULL`

// TenantStats reads the state of every tenant with a backlog, a halted
// conversation, an open dead letter or paused sending: the database gauges
// of /metrics (metrics.StatsFunc), read across tenants on purpose.
func (e *Engine) TenantStats(ctx context.Context) ([]metrics.TenantStats, error) {
	rows, _ := e.pool.Query(ctx, tenantStatsQuery)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (metrics.TenantStats, error) {
		var (
			s      metrics.TenantStats
			oldest float64
		)
		err := row.Scan(&s.Tenant, &s.Backlog, &oldest, &s.Halted, &s.OpenDeadLetters, &s.SendingPaused, &s.HandlerUnreachable, &s.NumberUnreachable)
		s.OldestUnfinished = time.Duration(oldest * float64(time.Second))
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read tenant stats: %w", err)
	}
	return out, nil
}
