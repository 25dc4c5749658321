package sql

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Before its first release ordo numbered River's migrations into its own
// golang-migrate sequence (River's n was ordo's n+1, ordo's own were 1 and
// 10 to 15) in table public.ordo_schema_migrations, and River's
// river_migration table was created but never written. A database in that
// layout at its last version holds exactly what the new layout builds —
// River's tables through River's migration 8, ordo's tables as in
// migrations/000001_baseline — so it is recorded as such, once, without
// touching its data: River's versions in River's table, ordo's baseline in
// ordo's, the old table dropped. Its functions are then replaced by the
// files (sql.Up's last step), as on any upgrade.
const (
	oldLayoutTable        = "ordo_schema_migrations"
	oldLayoutVersion      = 15
	oldLayoutRiverVersion = 8
	baselineVersion       = 1
)

// baselineOldLayout records a database of the old layout under the new one;
// it does nothing on any other database.
func baselineOldLayout(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var old bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('public.`+oldLayoutTable+`') IS NOT NULL`).Scan(&old); err != nil {
			return fmt.Errorf("look for the old migrations table: %w", err)
		}
		if !old {
			return nil
		}
		var (
			version int64
			dirty   bool
		)
		err := tx.QueryRow(ctx, `SELECT version, dirty FROM public.`+oldLayoutTable).Scan(&version, &dirty)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Migrated all the way down: nothing to keep but the table.
			_, err := tx.Exec(ctx, `DROP TABLE public.`+oldLayoutTable)
			return err
		case err != nil:
			return fmt.Errorf("read the old migrations table: %w", err)
		case dirty || version != oldLayoutVersion:
			return fmt.Errorf("database at old-layout version %d (dirty=%t): only %d can be upgraded; migrate it to %d with the ordo that made it first",
				version, dirty, oldLayoutVersion, oldLayoutVersion)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.river_migration (line, version)
SELECT 'main', v FROM generate_series(1, $1::int) v ON CONFLICT DO NOTHING`, oldLayoutRiverVersion); err != nil {
			return fmt.Errorf("record river's migrations: %w", err)
		}
		// The table as golang-migrate creates it.
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.`+MigrationsTable+
			` (version bigint not null primary key, dirty boolean not null)`); err != nil {
			return fmt.Errorf("create %s: %w", MigrationsTable, err)
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM public.`+MigrationsTable).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("both public.%s and public.%s hold a version: resolve by hand", oldLayoutTable, MigrationsTable)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO public.`+MigrationsTable+` (version, dirty) VALUES ($1, false)`, baselineVersion); err != nil {
			return fmt.Errorf("record the baseline: %w", err)
		}
		// Its functions were made by its migrations, not from files: list
		// them as applied with no checksum, so that sql.Up replaces those
		// that have a file and drops those that no longer have one.
		if _, err := tx.Exec(ctx, createChecksumsTable); err != nil {
			return fmt.Errorf("create %s: %w", FunctionChecksumsTable, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+FunctionChecksumsTable+` (name, sha256)
SELECT DISTINCT p.proname, '' FROM pg_proc p
WHERE p.pronamespace = '`+Schema+`'::regnamespace AND p.proname NOT LIKE 'river\_%'
ON CONFLICT (name) DO NOTHING`); err != nil {
			return fmt.Errorf("record the old layout's functions: %w", err)
		}
		if _, err := tx.Exec(ctx, `DROP TABLE public.`+oldLayoutTable); err != nil {
			return fmt.Errorf("drop the old migrations table: %w", err)
		}
		return nil
	})
}
