package sql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// TestImportDrainsAndPacingTakeLocksInOneOrder is the batch-import
// deadlock, forced step by step. An application's transaction enqueues to
// conversations B then A of one paced tenant while two drains run:
//
//   - drain 2 starts a send on B: before the fix it held B with KEY SHARE
//     (which the import's update does not wait for), locked the number's
//     send_pacing row, then tried to upgrade B to write its reserved slot —
//     waiting for the import;
//   - drain 1, holding A (its previous message's finish), starts a send and
//     waits for send_pacing, held by drain 2;
//   - the import moves on to A and waits for drain 1: a cycle.
//
// With one lock order (conversation row, in the mode its writer needs, then
// send_pacing) drain 2 waits for B before it touches send_pacing, drain 1
// gets its slot, and everything commits in turn.
func TestImportDrainsAndPacingTakeLocksInOneOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := sqltest.URL(t)
	admin := connectAs(t, url, "admin")
	var tenant, convA, convB, msgA, msgB int64
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', 1)`,
		`SELECT id FROM ordo.enqueue_message('acme', 'A', 'a1', 'outbound', '{"type":"text","text":{"body":"a"}}')`,
		`SELECT id FROM ordo.enqueue_message('acme', 'B', 'b1', 'outbound', '{"type":"text","text":{"body":"b"}}')`,
		`UPDATE ordo.conversations SET fence = 1`,
		// The number's next slot is seconds away: a reservation is written
		// to the conversation (send_slot_at).
		`INSERT INTO ordo.send_pacing (phone_number_id, next_slot) VALUES ('p1', now() + interval '10 s')`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := admin.QueryRow(ctx, `SELECT t.id, a.id, b.id, ma.id, mb.id FROM ordo.tenants t, ordo.conversations a, ordo.conversations b, ordo.messages ma, ordo.messages mb
		WHERE a.conversation_id = 'A' AND b.conversation_id = 'B' AND ma.message_id = 'a1' AND mb.message_id = 'b1'`).Scan(&tenant, &convA, &convB, &msgA, &msgB); err != nil {
		t.Fatal(err)
	}
	const startSend = `SELECT verdict FROM ordo.start_step($1, 1, $2, $3, 0, 'send', '{"type":"text","text":{"body":"x"}}', 'p1')`

	begin := func(name string) (*pgx.Conn, pgx.Tx) {
		conn := connectAs(t, url, name)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return conn, tx
	}
	_, imp := begin("import")
	_, d1 := begin("drain1")
	_, d2 := begin("drain2")

	if _, err := imp.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'B', 'b2', 'outbound', '{"type":"text","text":{"body":"b2"}}')`); err != nil {
		t.Fatal(err)
	}
	// Drain 1 holds A as its previous message's finish does.
	if _, err := d1.Exec(ctx, `UPDATE ordo.conversations SET head_seq = head_seq WHERE id = $1 AND fence = 1`, convA); err != nil {
		t.Fatal(err)
	}
	run := func(tx pgx.Tx, sql string, args ...any) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := tx.Exec(ctx, sql, args...)
			done <- err
		}()
		return done
	}
	d2Done := run(d2, startSend, convB, tenant, msgB)
	waitLocked(t, admin, "drain2")
	d1Done := run(d1, startSend, convA, tenant, msgA)
	select { // after the fix drain 1 gets its slot; before, it waits for drain 2
	case err := <-d1Done:
		d1Done <- err
	case <-time.After(300 * time.Millisecond):
	}
	impDone := run(imp, `SELECT ordo.enqueue_message('acme', 'A', 'a2', 'outbound', '{"type":"text","text":{"body":"a2"}}')`)
	waitLocked(t, admin, "import")

	check := func(what string, done chan error, tx pgx.Tx) {
		t.Helper()
		select {
		case err := <-done:
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected {
				t.Fatalf("%s: %v — the lock order has a cycle", what, err)
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting", what)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s commit: %v", what, err)
		}
	}
	check("drain 1", d1Done, d1)
	check("import", impDone, imp)
	check("drain 2", d2Done, d2)
}

// waitLocked waits until session name waits for a lock.
func waitLocked(t *testing.T, admin *pgx.Conn, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting bool
		if err := admin.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock')`, name).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s never waited for a lock", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
