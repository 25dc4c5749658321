// Package sql owns ordo's schema and applies it, in one step and in this
// order (sql.Up; sql.Down reverses it):
//
//  1. schema ordo;
//  2. River's tables, by River's own migrator (river.go), recorded in
//     ordo.river_migration;
//  3. ordo's tables and indexes, by golang-migrate from migrations/,
//     recorded in public.ordo_migrations;
//  4. ordo's SQL functions, one file each in functions/, re-applied when a
//     file changes (functions.go), recorded in ordo.function_checksums.
//
// A database migrated by an older ordo that numbered River's migrations into
// its own sequence is recognised and recorded under this layout once
// (baseline.go). Queries live next to the code that runs them; the schema
// lives here.
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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable is golang-migrate's bookkeeping table for ordo's own
// migrations (in schema public), named so it does not collide with an
// application's own golang-migrate table in the same database.
const MigrationsTable = "ordo_migrations"

// migrateLock serializes sql.Up and sql.Down across processes (a session
// advisory lock, "ordomig" in ASCII; the drains' locks take two keys, a
// space of their own): River's migrator takes no lock of its own, and the
// function step must not run twice at once.
const migrateLock = 0x6f72646f6d6967

// OldestServed is the oldest build, named by its newest migration, that
// may run against this build's schema. In a rolling deploy `ordo migrate
// up` comes first, and the processes of the build before go on (and stay
// ready) until they are replaced; a build older than this one is not ready
// on it and does not start. Raise it to the new migration's number when a
// change breaks what an older build calls or reads: a function's signature
// (TestCalledFunctionSignaturesAreKept says when), a column it reads, a
// constraint it does not meet. sql.Up records it in ordo.schema_serves.
const OldestServed = 52

// ErrNotServed is CheckMigrated's answer on a newer schema that no longer
// serves this build (OldestServed).
var ErrNotServed = errors.New("the schema no longer serves this build")

// LatestVersion is the newest of ordo's own migrations this binary carries.
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

// Up brings the database to this binary's schema: schema, River's
// migrations, ordo's migrations, functions. It is safe to run from several
// processes at once (they take turns on an advisory lock) and does no DDL
// on an up-to-date database.
func Up(databaseURL string) error {
	return withLock(databaseURL, func(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool) error {
		if err := baselineOldLayout(ctx, conn); err != nil {
			return err
		}
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regnamespace('`+Schema+`') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("look up schema %s: %w", Schema, err)
		}
		if !exists {
			// Only when missing: CREATE SCHEMA IF NOT EXISTS needs the CREATE
			// privilege on the database even when the schema is there.
			if _, err := conn.Exec(ctx, `CREATE SCHEMA `+Schema); err != nil {
				return fmt.Errorf("create schema %s: %w", Schema, err)
			}
		}
		if v, err := schemaVersion(ctx, conn); err != nil {
			return err
		} else if v > LatestVersion() {
			// An older build's migrate (a job left over from the deploy
			// before) would put its functions back over the newer ones.
			return fmt.Errorf("the schema is at version %d, newer than this build's %d: migrate with the newer build", v, LatestVersion())
		}
		if err := riverUp(ctx, pool); err != nil {
			return err
		}
		if err := runMigrate(databaseURL, func(m *migrate.Migrate) error { return m.Up() }); err != nil {
			return err
		}
		if err := applyFunctions(ctx, conn); err != nil {
			return fmt.Errorf("apply functions: %w", err)
		}
		if _, err := conn.Exec(ctx, recordServed, OldestServed); err != nil {
			return fmt.Errorf("record the oldest build served: %w", err)
		}
		return nil
	})
}

// Down removes everything Up made, in reverse: functions, ordo's tables,
// River's tables, the schema (which must then be empty).
func Down(databaseURL string) error {
	return withLock(databaseURL, func(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool) error {
		if err := baselineOldLayout(ctx, conn); err != nil {
			return err
		}
		if err := dropFunctions(ctx, conn); err != nil {
			return fmt.Errorf("drop functions: %w", err)
		}
		if err := runMigrate(databaseURL, func(m *migrate.Migrate) error { return m.Down() }); err != nil {
			return err
		}
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regnamespace('`+Schema+`') IS NOT NULL`).Scan(&exists); err != nil || !exists {
			return err
		}
		if err := riverDown(ctx, pool); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+Schema); err != nil {
			return fmt.Errorf("drop schema %s: %w", Schema, err)
		}
		return nil
	})
}

// withLock runs f holding migrateLock on conn; pool is for River's migrator.
func withLock(databaseURL string, f func(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool) error) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return errors.New("parse DATABASE_URL: not a Postgres URL")
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect for migrations: %w", err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLock)) //nolint:errcheck
	return f(ctx, conn.Conn(), pool)
}

func runMigrate(databaseURL string, f func(*migrate.Migrate) error) error {
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

// Serves reports the oldest build the schema at databaseURL serves, named
// by its newest migration (OldestServed, as the newest `migrate up`
// recorded it); 0 on a schema from before ordo.schema_serves.
func Serves(ctx context.Context, databaseURL string) (uint, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var (
		has    bool
		oldest int64
	)
	err = conn.QueryRow(ctx, hasServed).Scan(&has)
	if err == nil && has {
		err = conn.QueryRow(ctx, servedQuery).Scan(&oldest)
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read the oldest build the schema serves: %w", err)
	}
	return uint(oldest), nil
}

// ServesBuild says whether a schema at version (dirty, serving builds from
// oldest on) serves this build: its own version, or a newer one that
// still serves it — the schema's part of CheckMigrated.
func ServesBuild(version uint, dirty bool, oldest uint) bool {
	latest := LatestVersion()
	return !dirty && (version == latest || version > latest && oldest <= latest)
}

// Version reports the applied version of ordo's own migrations; dirty means
// one failed half way. (River's line is checked by CheckMigrated.)
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

const (
	versionQuery = `SELECT version, dirty FROM public.` + MigrationsTable
	hasVersion   = `SELECT to_regclass('public.` + MigrationsTable + `') IS NOT NULL`
	recordServed = `INSERT INTO ordo.schema_serves (oldest) VALUES ($1) ON CONFLICT (one) DO UPDATE SET oldest = excluded.oldest`
	servedQuery  = `SELECT oldest FROM ordo.schema_serves`
	hasServed    = `SELECT to_regclass('ordo.schema_serves') IS NOT NULL`
)

// schemaVersion is the applied version of ordo's own migrations, 0 before
// the first.
func schemaVersion(ctx context.Context, conn *pgx.Conn) (uint, error) {
	var (
		has bool
		v   int64
	)
	err := conn.QueryRow(ctx, hasVersion).Scan(&has)
	if err == nil && has {
		err = conn.QueryRow(ctx, versionQuery).Scan(&v, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return uint(v), nil
}

// CheckMigrated returns nil when the database is reachable and migrated to
// what this binary carries — River's line, ordo's line and the functions —
// or to a newer schema that still serves it (OldestServed: a rolling
// deploy under way, whose newer functions it calls): what /readyz reports.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	var (
		version int64
		dirty   bool
	)
	if err := pool.QueryRow(ctx, versionQuery).Scan(&version, &dirty); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	latest := LatestVersion()
	newer := uint(version) > latest
	switch {
	case dirty:
		return fmt.Errorf("schema at version %d is dirty: a migration failed half way (see `ordo migrate version`)", version)
	case uint(version) < latest:
		return fmt.Errorf("schema at version %d, this build needs %d (run `ordo migrate up`)", version, latest)
	case newer:
		var oldest int64
		if err := pool.QueryRow(ctx, servedQuery).Scan(&oldest); err != nil {
			return fmt.Errorf("schema at version %d, newer than this build's %d; read the oldest build it serves: %w", version, latest, err)
		}
		if uint(oldest) > latest {
			return fmt.Errorf("%w: at version %d it serves builds from %d on, this one is %d; replace this process with the newer build", ErrNotServed, version, oldest, latest)
		}
	}
	m, err := riverMigrator(pool)
	if err != nil {
		return err
	}
	res, err := m.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("read river's migrations: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("river's schema: %s", strings.Join(res.Messages, "; "))
	}
	if newer {
		return nil // the newer build's functions, which keep what this one calls
	}
	return checkFunctions(ctx, pool)
}

// MigrationFiles exposes the embedded migrations (sqltest hashes them, with
// FunctionFiles, to name its template database).
func MigrationFiles() fs.FS { return migrations }

// FunctionFiles exposes the embedded functions/ directory.
func FunctionFiles() fs.FS { return functions }
