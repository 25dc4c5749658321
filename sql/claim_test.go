package sql_test

import (
	"context"
	"testing"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// A batch claim reads the conversations it looks at, not every step of the
// database. Its look at whether each candidate's next message has a step
// was a NOT EXISTS in the select list, which the planner, once the
// statistics showed a ready set of thousands, turned into a hash of all of
// ordo.steps built on every claim: the claim's cost grew with the
// database's history (66 ms a claim at 112,000 steps; `make bench` spread
// builds 10,000 in a run). Counted in index entries read, not timed.
func TestBatchClaimDoesNotReadEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectAs(t, sqltest.URL(t), "claim")
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', 0)`,
		// The history: an old conversation of 20,000 messages, each sent.
		`INSERT INTO ordo.conversations (tenant_id, conversation_id, last_seq, head_seq)
		 SELECT id, 'old', 20000, 20000 FROM ordo.tenants`,
		`INSERT INTO ordo.messages (tenant_id, conversation_pk, message_id, seq, direction, payload, status)
		 SELECT c.tenant_id, c.id, 'old-' || g, g, 'outbound', '{}', 'done' FROM ordo.conversations c, generate_series(1, 20000) g`,
		`INSERT INTO ordo.steps (message_pk, idx, kind, status, attempts) SELECT id, 0, 'send', 'done', 1 FROM ordo.messages`,
		// A campaign: 2,000 conversations due, each with an outbound
		// message not started (checked, as ordo's ingest stores it).
		`SELECT ordo.enqueue_message('acme', 'c' || g, 'm' || g, 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)
		 FROM generate_series(1, 2000) g`,
		`VACUUM (ANALYZE) ordo.ready, ordo.conversations, ordo.messages, ordo.steps`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var claimed int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM ordo.claim((SELECT id FROM ordo.tenants WHERE slug = 'acme'), 0, 8, false, 30000, 'phone-1', NULL, NULL)`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != 8 {
		t.Fatalf("claimed %d conversations, want a batch of 8", claimed)
	}
	// The index entries of steps this transaction read: a probe per
	// candidate (the batch's 8 and the few looked at behind it) reads
	// none, as none has a step; a hash of the table reads 20,000.
	var read int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)
		FROM pg_index i WHERE i.indrelid = 'ordo.steps'::regclass`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	if read > 100 {
		t.Errorf("a batch claim of 8 read %d index entries of steps, with 20,000 old steps in the database; want only its candidates' (none)", read)
	}
}
