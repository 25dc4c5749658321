// Package sqltest gives each test a fresh, migrated database on the Postgres
// cluster named by ORDO_TEST_DATABASE_URL (make test starts one). Databases are
// cloned from a migrated template, so a new one costs a few milliseconds.
package sqltest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// EnvURL names the variable holding the test cluster's URL (any database on it).
const EnvURL = "ORDO_TEST_DATABASE_URL"

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// URL returns the URL of a fresh, migrated database that is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts a throwaway Postgres", EnvURL)
	}
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(base) })
	if templateErr != nil {
		t.Fatalf("prepare template database: %v", templateErr)
	}
	name := "ordo_test_" + randomHex(8)
	create(t, base, "CREATE DATABASE "+name+" TEMPLATE "+templateName)
	return withDatabase(base, name)
}

// EmptyURL returns the URL of a fresh database with no schema of ordo's in
// it, dropped when t ends (for tests of migrating itself).
func EmptyURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts a throwaway Postgres", EnvURL)
	}
	name := "ordo_test_" + randomHex(8)
	create(t, base, "CREATE DATABASE "+name)
	return withDatabase(base, name)
}

// create runs stmt (a CREATE DATABASE name …) on the cluster and drops the
// database when t ends.
func create(t testing.TB, base, stmt string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to test cluster: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	name := strings.Fields(stmt)[2]
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
}

// New returns a pool on a fresh, migrated database, closed and dropped when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ensureTemplate creates (once per cluster and migration set) a migrated
// database to clone. Test binaries run in parallel, so creation is serialized
// on an advisory lock.
func ensureTemplate(base string) (string, error) {
	ctx := context.Background()
	name := "ordo_template_" + migrationsHash()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7262)"); err != nil {
		return "", err
	}
	defer admin.Exec(ctx, "SELECT pg_advisory_unlock(7262)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	if err := ordosql.Up(withDatabase(base, building)); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", err
	}
	return name, nil
}

// migrationsHash names the template after everything that shapes the
// schema: ordo's migrations, its functions and the River module (whose
// migrations River's migrator applies).
func migrationsHash() string {
	h := sha256.New()
	for _, files := range []fs.FS{ordosql.MigrationFiles(), ordosql.FunctionFiles()} {
		_ = fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, _ := fs.ReadFile(files, path)
			h.Write([]byte(path))
			h.Write(b)
			return nil
		})
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if strings.HasPrefix(m.Path, "github.com/riverqueue/river") {
				h.Write([]byte(m.Path + "@" + m.Version))
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func withDatabase(base, name string) string {
	u, err := url.Parse(base)
	if err != nil {
		panic(fmt.Sprintf("%s is not a URL", EnvURL))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
