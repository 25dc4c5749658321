package sql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// assertFunctionsMatchFiles checks that schema ordo's functions are exactly
// sql/functions: each file's function exists once, with the definition the
// file makes (compared as Postgres prints both, the file's created in a
// scratch schema of a rolled-back transaction), and no function of ordo's
// (River's are named river_*) is without a file.
func assertFunctionsMatchFiles(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	files, err := ordosql.Functions()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no function files embedded")
	}
	byName := map[string]ordosql.Function{}
	for _, f := range files {
		byName[f.Name] = f
	}

	rows, err := pool.Query(ctx, `SELECT p.proname, p.prosrc, pg_get_functiondef(p.oid) FROM pg_proc p
		WHERE p.pronamespace = 'ordo'::regnamespace AND p.proname NOT LIKE 'river\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type dbFunc struct{ src, def string }
	inDB := map[string][]dbFunc{}
	var name, src, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &src, &def}, func() error {
		inDB[name] = append(inDB[name], dbFunc{src, def})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name := range inDB {
		if _, ok := byName[name]; !ok {
			t.Errorf("function ordo.%s is in the database but has no file sql/functions/%s.sql", name, name)
		}
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := tx.Exec(ctx, "CREATE SCHEMA ordo_check"); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got := inDB[f.Name]
		if len(got) != 1 {
			t.Errorf("ordo.%s: %d definitions in the database, want 1", f.Name, len(got))
			continue
		}
		if got[0].src != f.Body {
			t.Errorf("ordo.%s: body in the database differs from sql/functions/%s.sql", f.Name, f.Name)
		}
		scratch := strings.Replace(f.SQL, "FUNCTION ordo."+f.Name+"(", "FUNCTION ordo_check."+f.Name+"(", 1)
		if _, err := tx.Exec(ctx, scratch); err != nil {
			t.Fatalf("create %s in a scratch schema: %v", f.Name, err)
		}
		var want string
		if err := tx.QueryRow(ctx, `SELECT pg_get_functiondef(p.oid) FROM pg_proc p
			WHERE p.pronamespace = 'ordo_check'::regnamespace AND p.proname = $1`, f.Name).Scan(&want); err != nil {
			t.Fatal(err)
		}
		want = strings.Replace(want, "FUNCTION ordo_check."+f.Name+"(", "FUNCTION ordo."+f.Name+"(", 1)
		if got[0].def != want {
			t.Errorf("ordo.%s: database definition differs from its file:\n--- database\n%s\n--- file\n%s", f.Name, got[0].def, want)
		}
	}
}

// schemaSnapshot lists what shapes schema ordo — columns in order, defaults,
// constraints, indexes, storage options, types, triggers, functions — one
// line each, sorted, so two databases can be compared line by line.
func schemaSnapshot(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT 'column ' || c.relname || ' ' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = 'ordo'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = 'ordo'::regnamespace
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'ordo'
UNION ALL
SELECT 'relation ' || relname || ' ' || relkind::text || ' ' || coalesce(array_to_string(reloptions, ','), '')
FROM pg_class WHERE relnamespace = 'ordo'::regnamespace
UNION ALL
SELECT 'type ' || t.typname || ' ' || t.typtype::text || ' ' ||
       coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
FROM pg_type t WHERE t.typnamespace = 'ordo'::regnamespace
UNION ALL
SELECT 'trigger ' || tgrelid::regclass || ' ' || tgname || ' ' || pg_get_triggerdef(oid)
FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'ordo'::regnamespace)
UNION ALL
SELECT 'function ' || p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid))
FROM pg_proc p WHERE p.pronamespace = 'ordo'::regnamespace
ORDER BY 1`)
	if err != nil {
		t.Fatalf("snapshot schema ordo: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("snapshot schema ordo: %v", err)
	}
	return lines
}

// diffLines reports the lines only in a and only in b.
func diffLines(a, b []string) (onlyA, onlyB []string) {
	inB := map[string]int{}
	for _, l := range b {
		inB[l]++
	}
	for _, l := range a {
		if inB[l] > 0 {
			inB[l]--
		} else {
			onlyA = append(onlyA, l)
		}
	}
	inA := map[string]int{}
	for _, l := range a {
		inA[l]++
	}
	for _, l := range b {
		if inA[l] > 0 {
			inA[l]--
		} else {
			onlyB = append(onlyB, l)
		}
	}
	return onlyA, onlyB
}
