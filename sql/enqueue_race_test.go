package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// TestEnqueueCopyRacingAFinishingDrain is the deadlock the chaos run found
// under steady load: copy B of a message misses the original in
// its dedupe lookup because the original A is not committed yet, and waits
// for the conversation's row lock. A commits, a drain sends the message and
// writes its end (message done, then the conversation's head) — while B,
// holding the row lock now, inserts the message and, on the unique index,
// waits for that drain's uncommitted update of the original. The drain waits
// for B's row lock: Postgres breaks the cycle after deadlock_timeout by
// failing one of them, an ingest (a 500) or the drain's end (its send
// recorded as ambiguous, so sent again).
//
// The test holds B right after its conversation upsert (a trigger waits on
// an advisory lock) until the drain is queued behind B's row lock, then
// lets B go: B must answer duplicate without waiting for the drain, and the
// drain must commit.
func TestEnqueueCopyRacingAFinishingDrain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := sqltest.URL(t)
	admin := connectAs(t, url, "admin")

	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug) VALUES ('acme')`,
		// The copy stops here, holding the conversation's row lock, while
		// the test holds advisory lock 4242.
		`CREATE FUNCTION public.hold_copy() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF current_setting('application_name') = 'copy' THEN
		         PERFORM pg_advisory_xact_lock_shared(4242);
		     END IF;
		     RETURN NEW;
		 END $$`,
		`CREATE TRIGGER hold_copy AFTER UPDATE ON ordo.conversations FOR EACH ROW EXECUTE FUNCTION public.hold_copy()`,
		`SELECT pg_advisory_lock(4242)`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// A: the original, not committed yet.
	original := connectAs(t, url, "original")
	txA, err := original.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := txA.QueryRow(ctx, enqueue, "m1").Scan(new(int64), &seq, new(bool)); err != nil {
		t.Fatalf("enqueue the original: %v", err)
	}

	// B: the copy; its lookup misses A, so it queues for the conversation.
	type answer struct {
		seq       int64
		duplicate bool
		err       error
	}
	copyDone := make(chan answer, 1)
	copyConn := connectAs(t, url, "copy")
	go func() {
		var a answer
		a.err = copyConn.QueryRow(ctx, enqueue, "m1").Scan(new(int64), &a.seq, &a.duplicate)
		copyDone <- a
	}()
	waitFor(t, admin, "copy", "transactionid")
	if err := txA.Commit(ctx); err != nil {
		t.Fatalf("commit the original: %v", err)
	}
	waitFor(t, admin, "copy", "advisory") // B holds the row lock now

	// The drain's end, as jobs writes it in one batch: the message done,
	// then the head; the head waits for B's row lock.
	drain := connectAs(t, url, "drain")
	txD, err := drain.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txD.Exec(ctx, `UPDATE ordo.messages SET status = 'done', finished_at = now() WHERE message_id = 'm1'`); err != nil {
		t.Fatalf("drain: message done: %v", err)
	}
	headDone := make(chan error, 1)
	go func() {
		_, err := txD.Exec(ctx, `UPDATE ordo.conversations SET head_seq = 1 WHERE conversation_id = 'c1'`)
		headDone <- err
	}()
	waitFor(t, admin, "drain", "transactionid")

	if _, err := admin.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-copyDone:
		if a.err != nil {
			t.Fatalf("the copy failed: %v (deadlock with the drain)", a.err)
		}
		if !a.duplicate || a.seq != seq {
			t.Errorf("the copy answered seq %d duplicate %v, want the original's seq %d, duplicate", a.seq, a.duplicate, seq)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the copy did not answer")
	}
	if err := <-headDone; err != nil {
		t.Fatalf("the drain's end failed: %v", err)
	}
	if err := txD.Commit(ctx); err != nil {
		t.Fatalf("commit the drain's end: %v", err)
	}
	var last, head, messages int64
	if err := admin.QueryRow(ctx, `SELECT c.last_seq, c.head_seq, (SELECT count(*) FROM ordo.messages) FROM ordo.conversations c`).Scan(&last, &head, &messages); err != nil {
		t.Fatal(err)
	}
	if last != 1 || head != 1 || messages != 1 {
		t.Errorf("last_seq %d, head_seq %d, %d messages; want 1, 1, 1", last, head, messages)
	}
}

const enqueue = `SELECT id, seq, duplicate FROM ordo.enqueue_message('acme', 'c1', $1, 'outbound', '{"type": "text", "text": {"body": "hi"}}')`

// connectAs opens a connection whose sessions show as name in
// pg_stat_activity.
func connectAs(t *testing.T, url, name string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = name
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// beginAs opens a transaction on a connection of its own named name (as
// connectAs), rolled back at the test's end unless committed.
func beginAs(t *testing.T, url, name string) pgx.Tx {
	t.Helper()
	tx, err := connectAs(t, url, name).Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// waitFor waits until session name waits on a lock of kind event
// (pg_stat_activity.wait_event).
func waitFor(t *testing.T, admin *pgx.Conn, name, event string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting bool
		err := admin.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock' AND wait_event = $2)`,
			name, event).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s never waited on a %s lock", name, event)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
