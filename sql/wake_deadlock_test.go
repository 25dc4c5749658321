package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// An application's transaction enqueues to conversation b, then a, of a
// tenant whose handler comes back (or whose sending is resumed) meanwhile.
// ordo.dependency_back and ordo.resume_sending used to lock every waiting
// conversation of the tenant in conversation order, waiting for each: they
// took a, waited for b (held by the application), and the application's
// enqueue to a waited for them — a deadlock (the chaos run, seed 1). They
// now skip a conversation whose row is held and never wait.
func TestWakingATenantNeverWaitsForAnApplicationsRows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, mark, wake, state string }{
		{"handler back", "handler_wait", `SELECT ordo.dependency_back(id, 'handler') FROM ordo.tenants`,
			`INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at) SELECT id, 'handler', now(), now() FROM ordo.tenants`},
		{"number back", "number_wait", `SELECT ordo.dependency_back(id, 'number') FROM ordo.tenants`,
			`INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at) SELECT id, 'number', now(), now() FROM ordo.tenants`},
		{"sending resumed", "paused_wait", `SELECT ordo.resume_sending(id) FROM ordo.tenants`, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := sqltest.URL(t)
			admin := connectAs(t, url, "admin")
			for _, q := range []string{
				`INSERT INTO ordo.tenants (slug) VALUES ('acme')`,
				`SELECT ordo.enqueue_message('acme', 'a', 'a1', 'inbound', '{}')`,
				`SELECT ordo.enqueue_message('acme', 'b', 'b1', 'inbound', '{}')`,
				`UPDATE ordo.conversations SET ` + tc.mark + ` = true`,
				tc.state,
			} {
				if _, err := admin.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			app := connectAs(t, url, "app")
			tx, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'b', 'b2', 'inbound', '{}')`); err != nil {
				t.Fatal(err)
			}
			waker := connectAs(t, url, "waker")
			done := make(chan error, 1)
			go func() {
				_, err := waker.Exec(ctx, tc.wake)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("wake: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waking the tenant waited for a conversation the application holds")
			}
			if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'a', 'a2', 'inbound', '{}')`); err != nil {
				t.Fatalf("the application's second enqueue: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var woken, held int
			if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT `+tc.mark+`), count(*) FILTER (WHERE `+tc.mark+`) FROM ordo.conversations`).Scan(&woken, &held); err != nil {
				t.Fatal(err)
			}
			if woken != 1 || held != 1 {
				t.Fatalf("%d conversations woken, %d still marked; want a woken and b (held) left to its due time", woken, held)
			}
		})
	}
}
