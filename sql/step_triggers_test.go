package sql_test

import (
	"context"
	"slices"
	"testing"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// The console's counters and the tenant's events are written once per
// statement that changes steps (ordo.stats_on_step, ordo.event_on_step),
// as a batch's finish records many sends in one UPDATE: each send that
// became done counted once, a message's first send (and only it) in the
// latency histogram, one event per change in step id order whatever order
// the statement took the rows in, and nothing for a statement that changes
// no status.
func TestStepTriggersCountAndTellEachRowOfAStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectAs(t, sqltest.URL(t), "steps")
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO ordo.tenants (slug, events_url) VALUES ('acme', 'http://127.0.0.1:9/events')`)
	// Checked, as ordo's ingest stores them (no unchecked send step).
	exec(`SELECT ordo.enqueue_message('acme', 'a', 'a1', 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)`)
	exec(`SELECT ordo.enqueue_message('acme', 'b', 'b1', 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)`)
	exec(`SELECT ordo.enqueue_message('acme', 'c', 'c1', 'inbound', '{}')`)
	// a1 sends twice (idx 0, 1), b1 once, the inbound c1 is handled (idx 0)
	// and replied to (idx 1: its first send).
	exec(`INSERT INTO ordo.steps (message_pk, idx, kind, status, attempts)
		SELECT m.id, s.idx, s.kind, 'running', 1 FROM ordo.messages m
		JOIN (VALUES ('a1', 0, 'send'), ('a1', 1, 'send'), ('b1', 0, 'send'), ('c1', 0, 'handle'), ('c1', 1, 'send')) s(mid, idx, kind)
		  ON s.mid = m.message_id
		ORDER BY m.message_id, s.idx`)
	exec(`UPDATE ordo.steps s SET status = 'done', finished_at = now(), provider_message_id = 'wamid.' || s.id
		FROM (SELECT id FROM ordo.steps ORDER BY id DESC) d WHERE s.id = d.id`)
	// A statement that changes no status, then Meta's statuses for two sends.
	exec(`UPDATE ordo.steps SET errors = '[]'`)
	exec(`UPDATE ordo.steps s SET provider_status = 'delivered', provider_status_rank = 2
		FROM ordo.messages m WHERE m.id = s.message_pk AND m.message_id IN ('a1', 'b1') AND s.idx = 0`)

	var sent, accepted, firsts int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(sent), 0), coalesce(sum(accepted), 0),
		(SELECT coalesce(sum(x), 0) FROM ordo.stats_minutes, unnest(latency) x) FROM ordo.stats_minutes`).Scan(&sent, &accepted, &firsts); err != nil {
		t.Fatal(err)
	}
	if sent != 4 || accepted != 3 || firsts != 3 {
		t.Errorf("counted %d sent, %d accepted, %d first sends; want 4, 3, 3", sent, accepted, firsts)
	}

	rows, err := conn.Query(ctx, `SELECT e.type, m.message_id || '/' || s.idx
		FROM ordo.events e JOIN ordo.steps s ON s.id = (e.data->>'step_id')::bigint JOIN ordo.messages m ON m.id = s.message_pk
		ORDER BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var typ, step string
		if err := rows.Scan(&typ, &step); err != nil {
			t.Fatal(err)
		}
		got = append(got, typ+" "+step)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"message.sent a1/0", "message.sent a1/1", "message.sent b1/0", "message.sent c1/1",
		"message.delivered a1/0", "message.delivered b1/0"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q; want %q", got, want)
	}
}
