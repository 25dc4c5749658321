package sql_test

import (
	"context"
	"testing"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// A batch's finish offers a refill (the room its caught-up conversations
// left, for a claim of more of the tenant's conversations) only when the
// tenant has a due conversation that no drain holds. Every batch's last
// round offered one, and the claim that followed found nothing: a
// transaction for nothing at the end of each batch (`make bench` latency:
// 7,469 empty refills of 12,053).
func TestFinishOffersARefillOnlyWhenSomethingIsDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		dueAfter bool // another conversation became due before the finish
		want     int
	}{
		{"nothing else due", false, 0},
		{"another due", true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := connectAs(t, sqltest.URL(t), "finish")
			for _, q := range []string{
				`INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', 0)`,
				`SELECT ordo.enqueue_message('acme', 'c' || g, 'm' || g, 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)
				 FROM generate_series(1, 2) g`,
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			rows, err := conn.Query(ctx, `SELECT conv, fence, step_id, message_pk, seq FROM ordo.claim(
				(SELECT id FROM ordo.tenants WHERE slug = 'acme'), 0, 8, false, 30000, 'phone-1', NULL, NULL) WHERE batched`)
			if err != nil {
				t.Fatal(err)
			}
			var convs, fences, steps, msgs, seqs []int64
			for rows.Next() {
				var c, f, s, m, q int64
				if err := rows.Scan(&c, &f, &s, &m, &q); err != nil {
					t.Fatal(err)
				}
				convs, fences, steps, msgs, seqs = append(convs, c), append(fences, f), append(steps, s), append(msgs, m), append(seqs, q)
			}
			if err := rows.Err(); err != nil || len(convs) != 2 {
				t.Fatalf("claimed a batch of %d (%v), want 2", len(convs), err)
			}
			if tc.dueAfter {
				if _, err := conn.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'c3', 'm3', 'outbound', '{"type":"text","text":{"body":"x"}}', checked => true)`); err != nil {
					t.Fatal(err)
				}
			}
			var refill int
			if err := conn.QueryRow(ctx, `SELECT max(refill) FROM ordo.finish($1, $2, $3, ARRAY['wamid.1', 'wamid.2'], $4, $5,
				ARRAY[true, true], NULL, NULL, 'send', 0, 8, 'phone-1')`, convs, fences, steps, msgs, seqs).Scan(&refill); err != nil {
				t.Fatal(err)
			}
			if refill != tc.want {
				t.Errorf("refill %d, want %d", refill, tc.want)
			}
		})
	}
}
