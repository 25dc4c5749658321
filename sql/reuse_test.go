package sql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/sql/sqltest"
)

// enqueueBody offers message $1 in conversation $2 with text $3.
const enqueueBody = `SELECT id, seq, duplicate FROM ordo.enqueue_message('acme', $2, $1, 'outbound',
	jsonb_build_object('type', 'text', 'text', jsonb_build_object('body', $3::text)))`

// isReused reports whether err is enqueue_message's "message_id reused".
func isReused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == ordosql.SQLStateMessageIDReused
}

// A repeat with the same body (keys in another order included) is a
// duplicate; another text, conversation or direction is ORM01 and stores
// nothing; on_reuse => 'duplicate' answers it as a duplicate. The hash
// outlives the pruner, and a message with no hash (accepted before the
// column) is compared through its payload while it has one.
func TestEnqueueReusedID(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := connectAs(t, sqltest.URL(t), "admin")
	if _, err := admin.Exec(ctx, `INSERT INTO ordo.tenants (slug) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	var id, seq int64
	var dup bool
	if err := admin.QueryRow(ctx, enqueueBody, "m1", "c1", "hi").Scan(&id, &seq, &dup); err != nil || dup {
		t.Fatalf("first offer: dup %v, %v", dup, err)
	}
	// Same body written differently: jsonb is canonical.
	if err := admin.QueryRow(ctx, `SELECT duplicate FROM ordo.enqueue_message('acme', 'c1', 'm1', NULL, '{"text": {"body": "hi"},   "type": "text"}')`).Scan(&dup); err != nil || !dup {
		t.Fatalf("same body, other key order: dup %v, %v", dup, err)
	}
	for _, q := range []string{
		`SELECT duplicate FROM ordo.enqueue_message('acme', 'c1', 'm1', 'outbound', '{"type": "text", "text": {"body": "HI"}}')`,
		`SELECT duplicate FROM ordo.enqueue_message('acme', 'c2', 'm1', 'outbound', '{"type": "text", "text": {"body": "hi"}}')`,
		`SELECT duplicate FROM ordo.enqueue_message('acme', 'c1', 'm1', 'inbound', '{"type": "text", "text": {"body": "hi"}}')`,
	} {
		if err := admin.QueryRow(ctx, q).Scan(&dup); !isReused(err) {
			t.Errorf("%s: got dup %v, err %v; want SQLSTATE %s", q, dup, err, ordosql.SQLStateMessageIDReused)
		}
	}
	if err := admin.QueryRow(ctx, `SELECT duplicate FROM ordo.enqueue_message('acme', 'c1', 'm1', 'outbound', '{"type": "text", "text": {"body": "HI"}}', on_reuse => 'duplicate')`).Scan(&dup); err != nil || !dup {
		t.Errorf("on_reuse => duplicate: dup %v, %v", dup, err)
	}
	var last int64
	var convs, msgs int
	if err := admin.QueryRow(ctx, `SELECT (SELECT last_seq FROM ordo.conversations WHERE conversation_id = 'c1'),
		(SELECT count(*) FROM ordo.conversations), (SELECT count(*) FROM ordo.messages)`).Scan(&last, &convs, &msgs); err != nil {
		t.Fatal(err)
	}
	if last != 1 || convs != 1 || msgs != 1 {
		t.Errorf("after the refused offers: last_seq %d, %d conversations, %d messages; want 1, 1, 1", last, convs, msgs)
	}

	// Pruned: the payload is gone, the hash stays and still tells.
	if _, err := admin.Exec(ctx, `UPDATE ordo.messages SET status = 'done', payload = NULL`); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, enqueueBody, "m1", "c1", "HI").Scan(&id, &seq, &dup); !isReused(err) {
		t.Errorf("other body after pruning: %v, want reused", err)
	}
	if err := admin.QueryRow(ctx, enqueueBody, "m1", "c1", "hi").Scan(&id, &seq, &dup); err != nil || !dup || seq != 1 {
		t.Errorf("same body after pruning: seq %d dup %v, %v", seq, dup, err)
	}

	// Accepted before the column: compared through the payload, then (once
	// pruned) a duplicate whatever the body.
	if err := admin.QueryRow(ctx, enqueueBody, "m2", "c1", "old").Scan(&id, &seq, &dup); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE ordo.messages SET body_hash = NULL WHERE message_id = 'm2'`); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, enqueueBody, "m2", "c1", "new").Scan(&id, &seq, &dup); !isReused(err) {
		t.Errorf("legacy message, other body: %v, want reused", err)
	}
	if err := admin.QueryRow(ctx, enqueueBody, "m2", "c1", "old").Scan(&id, &seq, &dup); err != nil || !dup {
		t.Errorf("legacy message, same body: dup %v, %v", dup, err)
	}
	if _, err := admin.Exec(ctx, `UPDATE ordo.messages SET status = 'done', payload = NULL WHERE message_id = 'm2'`); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, enqueueBody, "m2", "c1", "new").Scan(&id, &seq, &dup); err != nil || !dup {
		t.Errorf("legacy pruned message: dup %v, %v; want a duplicate (nothing to compare)", dup, err)
	}
}

// The two places a concurrent copy is found: after waiting for the
// conversation's row lock (same conversation), and on the unique index
// (another conversation). A copy with another body is refused in both.
func TestEnqueueReusedIDRacingTheOriginal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, conv, event string
	}{
		{"same conversation", "c1", "transactionid"},
		{"other conversation", "c2", "transactionid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := sqltest.URL(t)
			admin := connectAs(t, url, "admin")
			if _, err := admin.Exec(ctx, `INSERT INTO ordo.tenants (slug) VALUES ('acme')`); err != nil {
				t.Fatal(err)
			}
			original := connectAs(t, url, "original")
			txA, err := original.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := txA.Exec(ctx, enqueueBody, "m1", "c1", "original"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			other := connectAs(t, url, "other")
			go func() {
				var dup bool
				done <- other.QueryRow(ctx, enqueueBody, "m1", tc.conv, "another body").Scan(new(int64), new(int64), &dup)
			}()
			waitFor(t, admin, "other", tc.event)
			if err := txA.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !isReused(err) {
					t.Errorf("the copy with another body: %v, want SQLSTATE %s", err, ordosql.SQLStateMessageIDReused)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the copy did not answer")
			}
			var msgs int
			var last int64
			if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM ordo.messages), (SELECT coalesce(sum(last_seq), 0) FROM ordo.conversations)`).Scan(&msgs, &last); err != nil {
				t.Fatal(err)
			}
			if msgs != 1 || last != 1 {
				t.Errorf("%d messages, last_seq sum %d; want 1, 1", msgs, last)
			}
		})
	}
}
