package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
			admin, tx, done := wakeWhileAnApplicationHoldsB(t, tc.mark, tc.state, tc.wake, nil)
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

// Waking a tenant's conversations never waits for one row while it holds
// another. It waited up to 200 ms (lock_timeout) for a row an application
// held, holding the rows it had woken before: an application that asked
// for one of those meanwhile was in a cycle with it until the timeout, and
// a third transaction's deadlock check (a claim waiting for the
// application's row, after Postgres's deadlock_timeout) found the cycle
// and failed ("deadlock detected", make chaos seed 1). Forced here: the
// application asks for a while the wake may be waiting for b, and checks
// for deadlocks after 20 ms rather than a second.
func TestWakingATenantHoldsNoRowWhileItWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, tx, done := wakeWhileAnApplicationHoldsB(t, "handler_wait",
		`INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at) SELECT id, 'handler', now(), now() FROM ordo.tenants`,
		`SELECT ordo.dependency_back(id, 'handler') FROM ordo.tenants`,
		// Deadlocks checked after 20 ms, not a second.
		[]string{`SET deadlock_timeout = '20ms'`})
	// Until the wake waits for a lock, or is over.
	var wakeErr error
	finished := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		select {
		case wakeErr = <-done:
			finished = true
		default:
		}
		var waiting bool
		if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'waker' AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if finished || waiting {
			break
		}
	}
	if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'a', 'a2', 'inbound', '{}')`); err != nil {
		t.Fatalf("the application's enqueue to a, which the wake took: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !finished {
		select {
		case wakeErr = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the wake did not end")
		}
	}
	if wakeErr != nil {
		t.Fatalf("wake: %v", wakeErr)
	}
}

// wakeWhileAnApplicationHoldsB sets up tenant acme with conversations a and
// b, both marked (mark) as waiting for what state makes away; an
// application (its session first given settings) then holds b in an open
// transaction, tx, and wake runs on a connection of its own: done gets its
// error when it ends.
func wakeWhileAnApplicationHoldsB(t *testing.T, mark, state, wake string, settings []string) (admin *pgx.Conn, tx pgx.Tx, done <-chan error) {
	t.Helper()
	ctx := context.Background()
	url := sqltest.URL(t)
	admin = connectAs(t, url, "admin")
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug) VALUES ('acme')`,
		`SELECT ordo.enqueue_message('acme', 'a', 'a1', 'inbound', '{}')`,
		`SELECT ordo.enqueue_message('acme', 'b', 'b1', 'inbound', '{}')`,
		`UPDATE ordo.conversations SET ` + mark + ` = true`,
		state,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	app := connectAs(t, url, "app")
	for _, q := range settings {
		if _, err := app.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'b', 'b2', 'inbound', '{}')`); err != nil {
		t.Fatal(err)
	}
	waker := connectAs(t, url, "waker")
	ch := make(chan error, 1)
	go func() {
		_, err := waker.Exec(ctx, wake)
		ch <- err
	}()
	return admin, tx, ch
}
