package sql_test

import (
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/sql/sqltest"
)

// dependenciesMigration is the migration that moved a tenant's handler and
// number reachability from the tenant row to ordo.dependencies.
const dependenciesMigration = 51

// versionBefore is the newest of ordo's migrations older than v.
func versionBefore(t *testing.T, v uint) uint {
	t.Helper()
	entries, err := fs.ReadDir(ordosql.MigrationFiles(), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var before []uint
	for _, e := range entries {
		n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err == nil && uint(n) < v {
			before = append(before, uint(n))
		}
	}
	if len(before) == 0 {
		t.Fatalf("no migration before %d", v)
	}
	return slices.Max(before)
}

// An upgrade in the middle of an outage keeps it: a tenant whose handler is
// unreachable now is still unreachable after migration 000051 moved the
// state to ordo.dependencies (and after its down migration moved it back),
// its reason, probes' pace and the number's evidence kept, and the way back
// still finds it down. A tenant with nothing to remember gets no rows.
func TestDependenciesMigrationKeepsADownTenantDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := sqltest.URL(t)
	pool := openPool(t, url)
	var acme, calm int64
	if err := pool.QueryRow(ctx, `INSERT INTO ordo.tenants (slug) VALUES ('acme') RETURNING id`).Scan(&acme); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO ordo.tenants (slug) VALUES ('calm') RETURNING id`).Scan(&calm); err != nil {
		t.Fatal(err)
	}
	// acme's handler refused a connection (down at once); one send of its
	// number failed (evidence, not down).
	for _, q := range []string{
		`SELECT ordo.dependency_failed($1, 'handler', 7, false, 'connection refused', true, 3, false, 2000, 300000, 30000, NULL)`,
		`SELECT ordo.dependency_failed($1, 'number', 8, false, '503', false, 3, true, 5000, 300000, 60000, NULL)`,
	} {
		if _, err := pool.Exec(ctx, q, acme); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	type state struct {
		DownSince *time.Time
		Reason    *string
		ProbeAt   *time.Time
		Probes    int
		Steps     []int64
	}
	read := func(q string, id int64) state {
		t.Helper()
		var s state
		if err := pool.QueryRow(ctx, q, id).Scan(&s.DownSince, &s.Reason, &s.ProbeAt, &s.Probes, &s.Steps); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return s
	}
	const (
		handlerNow = `SELECT down_since, down_reason, probe_at, probes, fail_steps FROM ordo.dependencies WHERE tenant_id = $1 AND what = 'handler'`
		numberNow  = `SELECT down_since, down_reason, probe_at, probes, fail_steps FROM ordo.dependencies WHERE tenant_id = $1 AND what = 'number'`
		handlerOld = `SELECT handler_down_since, handler_down_reason, handler_probe_at, handler_down_probes, handler_fail_steps FROM ordo.tenants WHERE id = $1`
		numberOld  = `SELECT number_down_since, number_down_reason, number_probe_at, number_down_probes, number_fail_steps FROM ordo.tenants WHERE id = $1`
	)
	handler, number := read(handlerNow, acme), read(numberNow, acme)
	if handler.DownSince == nil || handler.ProbeAt == nil || handler.Probes != 1 || number.DownSince != nil || !slices.Equal(number.Steps, []int64{8}) {
		t.Fatalf("before the migrations: handler %+v, number %+v; want the handler down and one failure of the number", handler, number)
	}
	same := func(when string, got, want state) {
		t.Helper()
		if !timesEqual(got.DownSince, want.DownSince) || !timesEqual(got.ProbeAt, want.ProbeAt) || got.Probes != want.Probes ||
			(got.Reason == nil) != (want.Reason == nil) || got.Reason != nil && *got.Reason != *want.Reason || !slices.Equal(got.Steps, want.Steps) {
			t.Errorf("%s: %+v; want %+v", when, got, want)
		}
	}

	if err := ordosql.MigrateTo(url, versionBefore(t, dependenciesMigration)); err != nil {
		t.Fatalf("down: %v", err)
	}
	same("handler on the tenant row after the down migration", read(handlerOld, acme), handler)
	same("number on the tenant row after the down migration", read(numberOld, acme), number)
	same("a calm tenant after the down migration", read(handlerOld, calm), state{})

	if err := ordosql.MigrateTo(url, ordosql.LatestVersion()); err != nil {
		t.Fatalf("up: %v", err)
	}
	same("handler after the up migration", read(handlerNow, acme), handler)
	same("number after the up migration", read(numberNow, acme), number)
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ordo.dependencies WHERE tenant_id = $1`, calm).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("a calm tenant has %d dependency rows (err %v); want none", rows, err)
	}
	// Still down: its way back finds it so.
	var back bool
	if err := pool.QueryRow(ctx, `SELECT ordo.dependency_back($1, 'handler')`, acme).Scan(&back); err != nil || !back {
		t.Errorf("ordo.dependency_back after the migrations = %t, %v; want true: the handler was still down", back, err)
	}
}

func timesEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
