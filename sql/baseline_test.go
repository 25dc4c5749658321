package sql_test

import (
	neturl "net/url"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/sql/sqltest"
)

// oldLayoutCommit is the last commit of the old layout: River's migrations
// numbered into ordo's golang-migrate sequence, ordo at version 15, every
// function's body in the migration that last redefined it.
const oldLayoutCommit = "121a39d864c873d36878a882aa72acf89a6319cc"

// oldLayoutMigrations reads that commit's sql/migrations from git history
// (copies in testdata would be more copies of every function).
func oldLayoutMigrations(t *testing.T) fstest.MapFS {
	t.Helper()
	git := func(args ...string) string {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Skipf("needs git history with commit %s: git %s: %v", oldLayoutCommit[:7], strings.Join(args, " "), err)
		}
		return string(out)
	}
	files := fstest.MapFS{}
	for _, path := range strings.Fields(git("ls-tree", "--name-only", oldLayoutCommit, "migrations/")) {
		name := strings.TrimPrefix(path, "migrations/")
		files[name] = &fstest.MapFile{Data: []byte(git("show", oldLayoutCommit+":sql/"+path))}
	}
	if len(files) != 28 {
		t.Fatalf("old layout: %d migration files, want 28 (versions 1 to 11, 13 to 15)", len(files))
	}
	return files
}

// TestUpgradeFromOldLayout: a database that an ordo of the old layout
// migrated (to 15) and used upgrades under Up with no data lost, and ends
// exactly where a new database ends: same schema, River's and ordo's lines
// recorded, the old bookkeeping gone, functions from the files.
func TestUpgradeFromOldLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	old := oldLayoutMigrations(t)
	url := sqltest.EmptyURL(t)

	src, err := iofs.New(old, ".")
	if err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", "ordo_schema_migrations")
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("old layout up: %v", err)
	}
	if v, _, _ := m.Version(); v != 15 {
		t.Fatalf("old layout at version %d, want 15", v)
	}
	m.Close()

	pool := openPool(t, url)
	// Data of every kind: a tenant, an accepted message with its drain job
	// (through the old enqueue_message), a step.
	var msgID int64
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', 10)`,
		`SELECT id FROM ordo.enqueue_message('acme', 'c1', 'm1', 'outbound', '{"type":"text"}')`,
		`INSERT INTO ordo.steps (message_pk, idx, kind, status) SELECT id, 0, 'send', 'done' FROM ordo.messages`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT id FROM ordo.messages`).Scan(&msgID); err != nil {
		t.Fatal(err)
	}

	if err := ordosql.Up(url); err != nil {
		t.Fatalf("Up on the old layout: %v", err)
	}

	if v, dirty, err := ordosql.Version(url); err != nil || v != ordosql.LatestVersion() || dirty {
		t.Errorf("Version = %d, dirty %t, err %v; want %d", v, dirty, err, ordosql.LatestVersion())
	}
	var oldTable bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('public.ordo_schema_migrations') IS NOT NULL`).Scan(&oldTable); err != nil || oldTable {
		t.Errorf("old migrations table still there (%t, %v)", oldTable, err)
	}
	if err := ordosql.CheckMigrated(ctx, pool); err != nil {
		t.Errorf("CheckMigrated after the upgrade: %v", err)
	}
	assertFunctionsMatchFiles(t, pool)

	// Nothing lost.
	var (
		tenants, rate, drains, steps int
		seq                          int64
	)
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ordo.tenants), (SELECT send_rate FROM ordo.tenants),
		(SELECT count(*) FROM ordo.ready),
		(SELECT count(*) FROM ordo.steps WHERE message_pk = $1), (SELECT seq FROM ordo.messages WHERE id = $1)`, msgID).
		Scan(&tenants, &rate, &drains, &steps, &seq); err != nil {
		t.Fatal(err)
	}
	if tenants != 1 || rate != 10 || drains != 1 || steps != 1 || seq != 1 {
		t.Errorf("after the upgrade: tenants %d, send_rate %d, ready conversations %d, steps %d, seq %d; want 1, 10, 1, 1, 1",
			tenants, rate, drains, steps, seq)
	}
	// The new functions work on the old data.
	var next int64
	if err := pool.QueryRow(ctx, `SELECT seq FROM ordo.enqueue_message('acme', 'c1', 'm2', 'outbound', '{"type":"text"}')`).Scan(&next); err != nil || next != 2 {
		t.Errorf("enqueue after the upgrade: seq %d, err %v; want 2", next, err)
	}

	// The same schema as a database made under the new layout.
	fresh := openPool(t, sqltest.URL(t))
	if onlyUpgraded, onlyFresh := diffLines(schemaSnapshot(t, pool), schemaSnapshot(t, fresh)); len(onlyUpgraded)+len(onlyFresh) > 0 {
		t.Errorf("upgraded schema differs from a new one:\nonly upgraded: %q\nonly new: %q", onlyUpgraded, onlyFresh)
	}

	// And from here on it is a database like any other.
	if err := ordosql.Up(url); err != nil {
		t.Errorf("second Up: %v", err)
	}
	if err := ordosql.Down(url); err != nil {
		t.Errorf("Down after the upgrade: %v", err)
	}
}

// TestOldLayoutAtAnotherVersionIsRefused: only the old layout's last
// version is recognised; anything else is an error that says what to do,
// and nothing is changed.
func TestOldLayoutAtAnotherVersionIsRefused(t *testing.T) {
	t.Parallel()
	url := sqltest.EmptyURL(t)
	pool := openPool(t, url)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE public.ordo_schema_migrations (version bigint not null primary key, dirty boolean not null);
		INSERT INTO public.ordo_schema_migrations VALUES (13, false)`); err != nil {
		t.Fatal(err)
	}
	err := ordosql.Up(url)
	if err == nil || !strings.Contains(err.Error(), "version 13") {
		t.Errorf("Up on an old layout at 13 = %v, want an error naming version 13", err)
	}
	var schema bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regnamespace('ordo') IS NOT NULL").Scan(&schema); err != nil || schema {
		t.Errorf("schema ordo created (%t, %v)", schema, err)
	}
}
