package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// dedupeConvSize is how many pruned messages each preloaded conversation has.
const dedupeConvSize = 100

// loadDedupeSQL fills ordo's template with what years of pruned messages
// leave: dedupe records (payload NULL, no steps) of a tenant of their own,
// wamid-like random message ids. The two unique indexes are dropped for the
// load and built again after it (a sort, not 20 million random inserts),
// under the names ordo.enqueue_message relies on. 20 million rows take
// about 10 minutes on the 2 shared cores here.
var loadDedupeSQL = []string{
	`SET maintenance_work_mem = '1GB'`,
	// The rows are consistent by construction: skip the foreign-key triggers,
	// which would check 40 million references one by one.
	`SET session_replication_role = replica`,
	`INSERT INTO ordo.tenants (slug, name) VALUES ('dedupe-history', 'preloaded dedupe records')`,
	`INSERT INTO ordo.conversations (tenant_id, conversation_id, last_seq, head_seq)
	 SELECT t.id, '1650' || lpad(g::text, 7, '0'), $2, $2
	 FROM ordo.tenants t, generate_series(1, $1::int) g WHERE t.slug = 'dedupe-history'`,
	`ALTER TABLE ordo.messages DROP CONSTRAINT messages_tenant_id_message_id_key, DROP CONSTRAINT messages_conversation_pk_seq_key`,
	`INSERT INTO ordo.messages (tenant_id, conversation_pk, message_id, seq, direction, payload, status, created_at, finished_at)
	 SELECT c.tenant_id, c.id, 'wamid.HBgL' || md5(c.id::text || ':' || s::text), s, 'inbound', NULL, 'done',
	        now() - interval '90 days', now() - interval '90 days'
	 FROM ordo.conversations c, generate_series(1, $1::int) s
	 WHERE c.tenant_id = (SELECT id FROM ordo.tenants WHERE slug = 'dedupe-history')`,
	`ALTER TABLE ordo.messages ADD CONSTRAINT messages_tenant_id_message_id_key UNIQUE (tenant_id, message_id),
	 ADD CONSTRAINT messages_conversation_pk_seq_key UNIQUE (conversation_pk, seq)`,
	`VACUUM (ANALYZE) ordo.messages`,
	`VACUUM (ANALYZE) ordo.conversations`,
}

// loadDedupe loads cfg.dedupeRows dedupe records into ordo's template, once.
func (b *benchEnv) loadDedupe(ctx context.Context) error {
	if b.cfg.dedupeRows <= 0 {
		return nil
	}
	start := time.Now()
	convs := max(b.cfg.dedupeRows/dedupeConvSize, 1)
	conn, err := pgx.Connect(ctx, b.cluster.URL(ordoTemplate))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i, q := range loadDedupeSQL {
		var args []any
		switch i {
		case 3:
			args = []any{convs, dedupeConvSize}
		case 5:
			args = []any{dedupeConvSize}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("load dedupe records: %w", err)
		}
	}
	var rows int64
	var size string
	if err := conn.QueryRow(ctx, `SELECT count(*), pg_size_pretty(pg_total_relation_size('ordo.messages')) FROM ordo.messages`).Scan(&rows, &size); err != nil {
		return err
	}
	b.logf("loaded %d dedupe records (ordo.messages with indexes: %s) in %s", rows, size, time.Since(start).Round(time.Second))
	return nil
}
