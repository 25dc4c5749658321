package sql_test

import (
	"testing"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// A tenant's handler and its WhatsApp number share one table and one set
// of functions, the dependency an argument: each one's outage stays its
// own. The handler going down leaves the number reachable (its probe goes
// at once, its way back finds nothing to do), and the tenant's events name
// the handler only; the handler's way back brings the handler back.
func TestDependenciesAreEachTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := openPool(t, sqltest.URL(t))
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO ordo.tenants (slug, events_url) VALUES ('acme', 'http://127.0.0.1:1/events') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var verdict string
	if err := pool.QueryRow(ctx, `SELECT verdict FROM ordo.dependency_failed($1, 'handler', 1, false, 'connection refused', true, 3, false, 2000, 300000, 30000, NULL)`, id).Scan(&verdict); err != nil || verdict != "down" {
		t.Fatalf("the handler's refused connection: %q, %v; want down", verdict, err)
	}
	var goNumber, goHandler bool
	if err := pool.QueryRow(ctx, `SELECT go FROM ordo.dependency_probe($1, 'number', interval '1 minute')`, id).Scan(&goNumber); err != nil || !goNumber {
		t.Errorf("the number's probe with the handler down: go %t, %v; want true (reachable)", goNumber, err)
	}
	var back bool
	if err := pool.QueryRow(ctx, `SELECT ordo.dependency_back($1, 'number')`, id).Scan(&back); err != nil || back {
		t.Errorf("the number's way back with the handler down: %t, %v; want false (it was not down)", back, err)
	}
	if err := pool.QueryRow(ctx, `SELECT go FROM ordo.dependency_probe($1, 'handler', interval '1 minute')`, id).Scan(&goHandler); err != nil || goHandler {
		t.Errorf("the handler's probe before its time: go %t, %v; want false (still down)", goHandler, err)
	}
	if err := pool.QueryRow(ctx, `SELECT ordo.dependency_back($1, 'handler')`, id).Scan(&back); err != nil || !back {
		t.Errorf("the handler's way back: %t, %v; want true", back, err)
	}
	var events string
	if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(type, ',' ORDER BY id), '') FROM ordo.events WHERE tenant_id = $1`, id).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != "tenant.handler_unreachable,tenant.handler_back" {
		t.Errorf("tenant events %q; want the handler's unreachable and back only", events)
	}
}
