package sql_test

import (
	"context"
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

// TestDownUp checks that the whole schema comes off and goes back on: an
// operator's `ordo migrate down` then `up` ends at the latest version.
func TestDownUp(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	pool := openPool(t, url)

	if err := ordosql.Down(url); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if tables := ordoTables(t, pool); len(tables) != 0 {
		t.Errorf("tables in schema ordo after Down: %v", tables)
	}
	if hasEnqueueMessage(t, pool) {
		t.Error("ordo.enqueue_message exists after Down")
	}
	if v, dirty, err := ordosql.Version(url); err != nil || v != 0 || dirty {
		t.Errorf("Version after Down = %d, dirty %t, err %v; want 0, clean", v, dirty, err)
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
	if !hasEnqueueMessage(t, pool) {
		t.Error("ordo.enqueue_message missing after Up")
	}
	if tables := ordoTables(t, pool); len(tables) == 0 {
		t.Error("no tables in schema ordo after Up")
	}

	// Up on an up-to-date database changes nothing and is no error.
	if err := ordosql.Up(url); err != nil {
		t.Errorf("second Up: %v", err)
	}
}

// TestCheckMigrated checks what /readyz relies on: nil on a migrated
// database, an error once the schema is gone.
func TestCheckMigrated(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	pool := openPool(t, url)

	if err := ordosql.CheckMigrated(t.Context(), pool); err != nil {
		t.Fatalf("CheckMigrated on a migrated database: %v", err)
	}
	if err := ordosql.Down(url); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if err := ordosql.CheckMigrated(t.Context(), pool); err == nil {
		t.Error("CheckMigrated after Down = nil, want an error")
	}
}
