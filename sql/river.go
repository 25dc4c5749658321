package sql

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Schema is the Postgres schema everything of ordo lives in, River's tables
// included, so ordo can share a database with an application that runs its
// own River (in another schema).
const Schema = "ordo"

// River's tables are River's own migration line ("main"), applied by River's
// migrator from the River module ordo is built with and recorded in River's
// own table (ordo.river_migration). Upgrading River is bumping the module:
// its new migrations run on the next `ordo migrate up`, nothing renumbered.
func riverMigrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Schema: Schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	return m, nil
}

func riverUp(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := riverMigrator(pool)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	return nil
}

func riverDown(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := riverMigrator(pool)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
		return fmt.Errorf("migrate river down: %w", err)
	}
	return nil
}
