package engine

// The overview's live numbers, per tenant and overall: accepted and sent
// per minute and accept→first-send p50/p99 over the last TilesWindow, the
// backlog, the oldest unfinished message and the open dead letters.
//
// The rates and latencies are read from ordo.stats_minutes, counted by
// triggers when a message is accepted and when a send is done
// (sql/functions/stats_on_*.sql): a refresh sums the window's minutes,
// whatever the number of messages stored. The backlog reads only the
// conversations with work (the ready set and the halted ones), the open
// dead letters their partial index.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TilesWindow is the span the rates and latencies cover (whole minutes).
const TilesWindow = 15 * time.Minute

// latencyBase is the histogram's bucket ratio (stats_on_step.sql).
const latencyBase = 1.25

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
	SendingPaused     bool       `json:"sending_paused"`
	latency           []int64
}

// Tiles is the tiles with what they cover.
type Tiles struct {
	At      time.Time `json:"at"`
	WindowS int       `json:"window_s"`
	Overall Tile      `json:"overall"`
	Tenants []Tile    `json:"tenants"`
}

// latencyBuckets is the histogram's length (stats_on_step.sql).
const latencyBuckets = 80

// StatsKeep is how long the per-minute counters are kept.
const StatsKeep = 48 * time.Hour

// tilesCounters sums the window's counters per tenant, each histogram
// bucket a column; the window is the last whole minutes of TilesWindow and
// the current one so far ($1 is the window in minutes).
var tilesCounters = func() string {
	var b strings.Builder
	b.WriteString("SELECT tenant_id, sum(accepted)::bigint, sum(sent)::bigint")
	for i := 1; i <= latencyBuckets; i++ {
		fmt.Fprintf(&b, ", sum(latency[%d])::bigint", i)
	}
	b.WriteString(`
FROM ordo.stats_minutes
WHERE minute > date_trunc('minute', now()) - make_interval(mins => $1)
GROUP BY tenant_id`)
	return b.String()
}()

// compactStats merges the shards of minutes that are over into shard -1
// (at most 5,000 rows a call, those no transaction holds: SKIP LOCKED, so
// it never waits for an ingest nor deadlocks with one), and drops minutes
// older than $1 seconds. Rows a straggling transaction writes to a merged
// minute are merged by a later call.
const compactStats = `
WITH gone AS (
    DELETE FROM ordo.stats_minutes s
    WHERE (s.minute, s.tenant_id, s.shard) IN (
        SELECT minute, tenant_id, shard FROM ordo.stats_minutes
        WHERE minute < date_trunc('minute', now()) - interval '1 minute' AND shard >= 0
        LIMIT 5000 FOR UPDATE SKIP LOCKED)
    RETURNING s.minute, s.tenant_id, s.accepted, s.sent, s.handled, s.latency
), buckets AS (
    SELECT g.minute, g.tenant_id, i, sum(g.latency[i])::int AS n
    FROM gone g, generate_series(1, 80) i GROUP BY g.minute, g.tenant_id, i
), merged AS (
    SELECT c.minute, c.tenant_id, c.accepted, c.sent, c.handled,
           (SELECT array_agg(b.n ORDER BY b.i) FROM buckets b WHERE b.minute = c.minute AND b.tenant_id = c.tenant_id) AS latency
    FROM (SELECT minute, tenant_id, sum(accepted) AS accepted, sum(sent) AS sent, sum(handled) AS handled FROM gone GROUP BY minute, tenant_id) c
), old AS (
    DELETE FROM ordo.stats_minutes WHERE minute < now() - make_interval(secs => $1::double precision)
)
INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, accepted, sent, handled, latency)
SELECT minute, tenant_id, -1, accepted, sent, handled, latency FROM merged ORDER BY minute, tenant_id
ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET
    accepted = s.accepted + EXCLUDED.accepted, sent = s.sent + EXCLUDED.sent, handled = s.handled + EXCLUDED.handled,
    latency = (SELECT array_agg(x.a + x.b ORDER BY x.i) FROM unnest(s.latency, EXCLUDED.latency) WITH ORDINALITY x(a, b, i))`

// CompactStats merges the counters of past minutes (see compactStats); the
// overview calls it before it reads, at most once a minute per process, so
// its read stays about one row per tenant and minute.
func (e *Engine) CompactStats(ctx context.Context) error {
	minute := time.Now().Unix() / 60
	if e.statsCompacted.Swap(minute) == minute {
		return nil
	}
	if _, err := e.pool.Exec(ctx, compactStats, StatsKeep.Seconds()); err != nil {
		e.statsCompacted.Store(0)
		return translate(err, "compact counters")
	}
	return nil
}

// activeConversations are those with work: in the ready set, or halted
// (conversations_halted_idx); nothing else can have a backlog.
const activeConversations = `
    SELECT r.conversation_pk AS id FROM ordo.ready r
    UNION
    SELECT c.id FROM ordo.conversations c WHERE c.halted_at IS NOT NULL`

// tilesLive: per tenant, the backlog and its oldest message, the open dead
// letters and whether sending is paused; with the clock.
const tilesLive = `
WITH active AS (` + activeConversations + `), backlog AS (
    SELECT c.tenant_id, sum(c.last_seq - c.head_seq) AS n, min(h.created_at) AS oldest
    FROM active a JOIN ordo.conversations c ON c.id = a.id
    LEFT JOIN LATERAL (SELECT m.created_at FROM ordo.messages m
                       WHERE m.conversation_pk = c.id AND m.seq > c.head_seq ORDER BY m.seq LIMIT 1) h ON true
    WHERE c.last_seq > c.head_seq
    GROUP BY c.tenant_id
), open_dl AS (
    SELECT d.tenant_id, count(*) AS n FROM ordo.dead_letters d WHERE d.resolved_at IS NULL GROUP BY d.tenant_id
)
SELECT t.id, t.slug, coalesce(b.n, 0)::bigint, b.oldest, coalesce(o.n, 0)::bigint, t.sending_paused_at IS NOT NULL,
       now(), extract(epoch FROM now() - date_trunc('minute', now()))
FROM (SELECT id, slug, sending_paused_at FROM ordo.tenants ORDER BY slug LIMIT 1000) t
LEFT JOIN backlog b ON b.tenant_id = t.id
LEFT JOIN open_dl o ON o.tenant_id = t.id
ORDER BY t.slug`

// AdminTiles reads the tiles in one snapshot: the overall tile and the
// first 1,000 tenants by slug.
func (e *Engine) AdminTiles(ctx context.Context) (Tiles, error) {
	if err := e.CompactStats(ctx); err != nil {
		return Tiles{}, err
	}
	var out Tiles
	err := e.adminReadBatch(ctx, queueTiles, func(br pgx.BatchResults) error {
		var err error
		out, err = readTiles(br)
		return err
	})
	if err != nil {
		return Tiles{}, translate(err, "read tiles")
	}
	return out, nil
}

// queueTiles queues the tiles' two statements, read by readTiles: one round
// trip with whatever else the caller queues.
func queueTiles(b *pgx.Batch) {
	b.Queue(tilesCounters, int(TilesWindow.Minutes())-1)
	b.Queue(tilesLive)
}

func readTiles(br pgx.BatchResults) (Tiles, error) {
	out := Tiles{WindowS: int(TilesWindow.Seconds()), Tenants: []Tile{}}
	type counters struct {
		accepted, sent int64
		latency        []int64
	}
	byTenant := map[int64]counters{}
	rows, _ := br.Query()
	var (
		id int64
		c  counters
	)
	c.latency = make([]int64, latencyBuckets)
	dest := []any{&id, &c.accepted, &c.sent}
	for i := range c.latency {
		dest = append(dest, &c.latency[i])
	}
	if _, err := pgx.ForEachRow(rows, dest, func() error {
		byTenant[id] = counters{c.accepted, c.sent, slices.Clone(c.latency)}
		return nil
	}); err != nil {
		return Tiles{}, err
	}
	rows, _ = br.Query()
	var (
		t         Tile
		intoMin   float64
		overallLt = make([]int64, latencyBuckets)
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &t.Tenant, &t.Backlog, &t.OldestUnfinished, &t.OpenDeadLetters, &t.SendingPaused, &out.At, &intoMin},
		func() error {
			tile := t
			c := byTenant[id]
			tile.AcceptedPerMinute, tile.SentPerMinute = float64(c.accepted), float64(c.sent)
			tile.latency = c.latency
			for i, n := range c.latency {
				overallLt[i] += n
			}
			out.Tenants = append(out.Tenants, tile)
			return nil
		})
	if err != nil {
		return Tiles{}, err
	}
	// The window so far: its whole minutes and the current one's seconds.
	minutes := TilesWindow.Minutes() - 1 + intoMin/60
	o := &out.Overall
	for i := range out.Tenants {
		x := &out.Tenants[i]
		o.AcceptedPerMinute += x.AcceptedPerMinute
		o.SentPerMinute += x.SentPerMinute
		o.Backlog += x.Backlog
		o.OpenDeadLetters += x.OpenDeadLetters
		if x.OldestUnfinished != nil && (o.OldestUnfinished == nil || x.OldestUnfinished.Before(*o.OldestUnfinished)) {
			o.OldestUnfinished = x.OldestUnfinished
		}
		x.AcceptedPerMinute /= minutes
		x.SentPerMinute /= minutes
		x.AcceptToSendP50MS, x.AcceptToSendP99MS = percentile(x.latency, 0.5), percentile(x.latency, 0.99)
	}
	o.AcceptedPerMinute /= minutes
	o.SentPerMinute /= minutes
	o.AcceptToSendP50MS, o.AcceptToSendP99MS = percentile(overallLt, 0.5), percentile(overallLt, 0.99)
	slices.SortFunc(out.Tenants, func(a, b Tile) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}

// percentile reads the q-quantile off a latency histogram: the geometric
// middle of its bucket (within 12 % of the true value); nil when empty.
func percentile(h []int64, q float64) *float64 {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return nil
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, n := range h {
		if seen += n; seen >= rank {
			v := 0.5
			if i > 0 {
				v = math.Pow(latencyBase, float64(i)-0.5)
			}
			return &v
		}
	}
	return nil
}
