package sql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/sql/sqltest"
)

// ordoTables lists the tables in schema ordo (River's included).
func ordoTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(),
		"SELECT table_name FROM information_schema.tables WHERE table_schema = 'ordo' ORDER BY table_name")
	if err != nil {
		t.Fatalf("list ordo tables: %v", err)
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func hasEnqueueMessage(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(),
		"SELECT count(*) FROM information_schema.routines WHERE routine_schema = 'ordo' AND routine_name = 'enqueue_message'").Scan(&n)
	if err != nil {
		t.Fatalf("look up ordo.enqueue_message: %v", err)
	}
	return n > 0
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestFunctionsMatchFiles: after Up (the template every test clones), the
// database's functions are sql/functions, no more, no less.
func TestFunctionsMatchFiles(t *testing.T) {
	t.Parallel()
	assertFunctionsMatchFiles(t, openPool(t, sqltest.URL(t)))
}

// TestDownUp checks that the whole schema comes off and goes back on: an
// operator's `ordo migrate down` then `up` ends at the latest version, with
// River's line and the functions back, and the same schema as before.
func TestDownUp(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	pool := openPool(t, url)
	before := schemaSnapshot(t, pool)

	if err := ordosql.Down(url); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if tables := ordoTables(t, pool); len(tables) != 0 {
		t.Errorf("tables in schema ordo after Down: %v", tables)
	}
	if hasEnqueueMessage(t, pool) {
		t.Error("ordo.enqueue_message exists after Down")
	}
	var schema bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regnamespace('ordo') IS NOT NULL").Scan(&schema); err != nil || schema {
		t.Errorf("schema ordo after Down: exists %t, err %v", schema, err)
	}
	if v, dirty, err := ordosql.Version(url); err != nil || v != 0 || dirty {
		t.Errorf("Version after Down = %d, dirty %t, err %v; want 0, clean", v, dirty, err)
	}
	// Down on an empty database is no error.
	if err := ordosql.Down(url); err != nil {
		t.Errorf("second Down: %v", err)
	}

	if err := ordosql.Up(url); err != nil {
		t.Fatalf("Up after Down: %v", err)
	}
	v, dirty, err := ordosql.Version(url)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v != ordosql.LatestVersion() || dirty {
		t.Errorf("Version after Up = %d, dirty %t; want %d, clean", v, dirty, ordosql.LatestVersion())
	}
	if err := ordosql.CheckMigrated(t.Context(), pool); err != nil {
		t.Errorf("CheckMigrated after Down, Up: %v", err)
	}
	assertFunctionsMatchFiles(t, pool)
	if onlyBefore, onlyAfter := diffLines(before, schemaSnapshot(t, pool)); len(onlyBefore)+len(onlyAfter) > 0 {
		t.Errorf("schema after Down, Up differs:\nonly before: %q\nonly after: %q", onlyBefore, onlyAfter)
	}

	// Up on an up-to-date database changes nothing and is no error.
	if err := ordosql.Up(url); err != nil {
		t.Errorf("second Up: %v", err)
	}
}

// TestChangedFunctionIsReapplied: a function whose file changed since it was
// applied (here: its recorded checksum no longer matches, and someone edited
// it by hand) is what /readyz reports, and Up puts the file's back.
func TestChangedFunctionIsReapplied(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := sqltest.URL(t)
	pool := openPool(t, url)
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION ordo.check_fence(conv bigint, token bigint) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END; $$`,
		`UPDATE ordo.function_checksums SET sha256 = 'edited' WHERE name = 'check_fence'`,
		// A function no file defines any more, as a removed file leaves it.
		`CREATE FUNCTION ordo.gone(x int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN x; END; $$`,
		`INSERT INTO ordo.function_checksums (name, sha256) VALUES ('gone', 'x')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := ordosql.CheckMigrated(ctx, pool); err == nil {
		t.Error("CheckMigrated with a changed function = nil, want an error")
	}
	if err := ordosql.Up(url); err != nil {
		t.Fatalf("Up: %v", err)
	}
	assertFunctionsMatchFiles(t, pool)
	if err := ordosql.CheckMigrated(ctx, pool); err != nil {
		t.Errorf("CheckMigrated after Up: %v", err)
	}
}

// TestCheckMigrated checks what /readyz relies on: nil on a migrated
// database, an error when River's line is behind, and once the schema is
// gone.
func TestCheckMigrated(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	pool := openPool(t, url)

	if err := ordosql.CheckMigrated(t.Context(), pool); err != nil {
		t.Fatalf("CheckMigrated on a migrated database: %v", err)
	}
	var latest int
	if err := pool.QueryRow(t.Context(), "DELETE FROM ordo.river_migration WHERE version = (SELECT max(version) FROM ordo.river_migration) RETURNING version").Scan(&latest); err != nil {
		t.Fatal(err)
	}
	if err := ordosql.CheckMigrated(t.Context(), pool); err == nil {
		t.Error("CheckMigrated with River's line behind = nil, want an error")
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO ordo.river_migration (line, version) VALUES ('main', $1)", latest); err != nil {
		t.Fatal(err)
	}
	if err := ordosql.CheckMigrated(t.Context(), pool); err != nil {
		t.Fatalf("CheckMigrated with River's line restored: %v", err)
	}

	if err := ordosql.Down(url); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if err := ordosql.CheckMigrated(t.Context(), pool); err == nil {
		t.Error("CheckMigrated after Down = nil, want an error")
	}
}

// TestCheckMigratedServesTheBuildBefore: what /readyz and a start see of
// the schema, by how it stands to this build. A newer schema that serves
// this build (a rolling deploy under way: the next build migrated, its
// functions in place) is ready; one that no longer serves it, an older
// one, or a dirty one is not, and the error says what to do.
func TestCheckMigratedServesTheBuildBefore(t *testing.T) {
	t.Parallel()
	next := ordosql.LatestVersion() + 1
	for _, tc := range []struct {
		name  string
		setup []string
		want  string // "" ready
		// serves: what `ordo migrate version` says of the versions alone
		// (ServesBuild; the functions are CheckMigrated's).
		serves bool
	}{
		{"this build's", nil, "", true},
		{"the next build's, serving this one", []string{
			fmt.Sprintf(`UPDATE public.ordo_migrations SET version = %d`, next),
			`CREATE OR REPLACE FUNCTION ordo.check_fence(conv bigint, token bigint) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END; $$`,
			`UPDATE ordo.function_checksums SET sha256 = 'next' WHERE name = 'check_fence'`,
			fmt.Sprintf(`UPDATE ordo.schema_serves SET oldest = %d`, ordosql.LatestVersion()),
		}, "", true},
		{"a later build's, no longer serving this one", []string{
			fmt.Sprintf(`UPDATE public.ordo_migrations SET version = %d`, next),
			fmt.Sprintf(`UPDATE ordo.schema_serves SET oldest = %d`, next),
		}, "replace this process with the newer build", false},
		{"older", []string{
			fmt.Sprintf(`UPDATE public.ordo_migrations SET version = %d`, ordosql.LatestVersion()-1),
		}, "run `ordo migrate up`", false},
		{"dirty", []string{`UPDATE public.ordo_migrations SET dirty = true`}, "a migration failed half way", false},
		{"this build's, a function not its own", []string{
			`UPDATE ordo.function_checksums SET sha256 = 'other' WHERE name = 'check_fence'`,
		}, "function ordo.check_fence is not this binary's", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := sqltest.URL(t)
			pool := openPool(t, url)
			for _, q := range tc.setup {
				if _, err := pool.Exec(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			v, dirty, err := ordosql.Version(url)
			if err != nil {
				t.Fatal(err)
			}
			oldest, err := ordosql.Serves(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			if got := ordosql.ServesBuild(v, dirty, oldest); got != tc.serves {
				t.Errorf("ServesBuild(%d, %t, %d) = %t, want %t", v, dirty, oldest, got, tc.serves)
			}
			err = ordosql.CheckMigrated(t.Context(), pool)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckMigrated: %v; want ready", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckMigrated: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
