// Package sql owns ordo's schema: the migrations (River's tables included) and
// the golang-migrate plumbing that applies them. Queries live next to the code
// that runs them; the schema lives here.
package sql

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable is golang-migrate's bookkeeping table, named so it does not
// collide with an application's own golang-migrate table in the same database.
const MigrationsTable = "ordo_schema_migrations"

// LatestVersion is the newest migration this binary carries.
func LatestVersion() uint {
	entries, _ := fs.ReadDir(migrations, "migrations")
	versions := make([]int, 0, len(entries))
	for _, e := range entries {
		n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err == nil {
			versions = append(versions, n)
		}
	}
	sort.Ints(versions)
	return uint(versions[len(versions)-1])
}

func newMigrate(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, errors.New("parse DATABASE_URL: not a URL")
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", MigrationsTable)
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("connect for migrations: %w", err)
	}
	return m, nil
}

// Up applies every migration not applied yet. It is safe to run from several
// processes at once: golang-migrate serializes them on an advisory lock.
func Up(databaseURL string) error {
	return run(databaseURL, func(m *migrate.Migrate) error { return m.Up() })
}

// Down reverts every migration, River's tables included.
func Down(databaseURL string) error {
	return run(databaseURL, func(m *migrate.Migrate) error { return m.Down() })
}

func run(databaseURL string, f func(*migrate.Migrate) error) error {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := f(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Version reports the applied version; dirty means a migration failed half way.
func Version(databaseURL string) (version uint, dirty bool, err error) {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return 0, false, err
	}
	defer m.Close()
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

const versionQuery = `SELECT version, dirty FROM public.` + MigrationsTable

// CheckMigrated returns nil when the database is reachable and migrated to the
// version this binary carries (what /readyz reports).
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	var (
		version int64
		dirty   bool
	)
	if err := pool.QueryRow(ctx, versionQuery).Scan(&version, &dirty); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if dirty || uint(version) != LatestVersion() {
		return fmt.Errorf("schema at version %d (dirty=%t), want %d", version, dirty, LatestVersion())
	}
	return nil
}

// MigrationFiles exposes the embedded migrations (sqltest hashes them to name
// its template database).
func MigrationFiles() fs.FS { return migrations }
