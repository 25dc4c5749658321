package sql_test

import (
	"context"
	"testing"
	"time"

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

// A claim of one conversation alone takes one conversation's row, never a
// second while it holds the first. It took the first due candidate's row
// FOR UPDATE, found it no longer due (another drain had parked it while the
// claim waited), and went on to the next candidate — still holding the
// first row, which a transaction cannot give back — and waited for that
// one's row: an application's import holding the second and then asking for
// the first deadlocked with it (make chaos-ha, "deadlock detected" in
// ordo.claim). Forced here: the park holds the first row while the claim
// reads the walk, the import holds the second.
func TestClaimAloneNeverHoldsOneRowWhileWaitingForAnother(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := sqltest.URL(t)
	admin := connectAs(t, url, "admin")
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug) VALUES ('acme')`,
		`SELECT ordo.enqueue_message('acme', 'a', 'a1', 'inbound', '{}')`,
		`SELECT ordo.enqueue_message('acme', 'b', 'b1', 'inbound', '{}')`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Another drain parks a for an hour, holding its row meanwhile.
	parkTx := beginAs(t, url, "park")
	if _, err := parkTx.Exec(ctx, `SELECT 1 FROM ordo.conversations WHERE conversation_id = 'a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := parkTx.Exec(ctx, `UPDATE ordo.ready SET due_at = now() + interval '1 hour'
		WHERE conversation_pk = (SELECT id FROM ordo.conversations WHERE conversation_id = 'a')`); err != nil {
		t.Fatal(err)
	}
	// The claim walks a (due, as far as it can see) and waits for its row.
	claimTx := beginAs(t, url, "claim")
	claimed := make(chan error, 1)
	go func() {
		var n int
		claimed <- claimTx.QueryRow(ctx, `SELECT count(*) FROM ordo.claim((SELECT id FROM ordo.tenants WHERE slug = 'acme'), 0, 0, true, 30000, NULL, NULL, NULL)`).Scan(&n)
	}()
	waitFor(t, admin, "claim", "transactionid")
	// An import holds b's row.
	impTx := beginAs(t, url, "import")
	if _, err := impTx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'b', 'b2', 'inbound', '{}')`); err != nil {
		t.Fatal(err)
	}
	// The park ends: a is not due any more.
	if err := parkTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Either the claim ends (right) or it waits for b's row, holding a's.
	select {
	case err := <-claimed:
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the claim waits for b's row while it holds a's: an import that takes a next deadlocks with it")
	}
	if err := claimTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The import goes on with a, and commits.
	if _, err := impTx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'a', 'a2', 'inbound', '{}')`); err != nil {
		t.Fatalf("the import's next conversation: %v", err)
	}
	if err := impTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A halted conversation found in the ready set (a dead letter under halt
// waits for an operator, out of the ready set) leaves it in the claim that
// finds it, and the claim goes on to the tenant's next due conversation:
// no drain is started for it, and it is not found again.
func TestClaimTakesAHaltedConversationOutOfTheReadySet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectAs(t, sqltest.URL(t), "claim")
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', 0)`,
		`SELECT ordo.enqueue_message('acme', 'halted', 'h1', 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)`,
		`SELECT ordo.enqueue_message('acme', 'next', 'n1', 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)`,
		// Halted, its ready row due first (as a race with a halt leaves it).
		`UPDATE ordo.conversations SET halted_at = now() WHERE conversation_id = 'halted'`,
		`UPDATE ordo.ready r SET due_at = now() - CASE WHEN c.conversation_id = 'halted' THEN interval '2 seconds' ELSE interval '1 second' END
		 FROM ordo.conversations c WHERE c.id = r.conversation_pk`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var claimed string
	if err := conn.QueryRow(ctx, `SELECT conversation_id FROM ordo.claim((SELECT id FROM ordo.tenants WHERE slug = 'acme'), 0, 0, true, 30000, NULL, NULL, NULL) LIMIT 1`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != "next" {
		t.Fatalf("claimed %q, want the conversation after the halted one", claimed)
	}
	var ready int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM ordo.ready r JOIN ordo.conversations c ON c.id = r.conversation_pk WHERE c.conversation_id = 'halted'`).Scan(&ready); err != nil {
		t.Fatal(err)
	}
	if ready != 0 {
		t.Fatal("the halted conversation is still in the ready set")
	}
	var locks int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 1 {
		t.Fatalf("the claim's session holds %d advisory locks, want 1 (the claimed conversation's)", locks)
	}
}
