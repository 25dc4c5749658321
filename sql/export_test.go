package sql

import "github.com/golang-migrate/migrate/v4"

// MigrateTo runs ordo's own migrations up or down to version, as
// golang-migrate does, and nothing else (no River, no functions): for tests
// of one migration's way there and back.
func MigrateTo(databaseURL string, version uint) error {
	return runMigrate(databaseURL, func(m *migrate.Migrate) error { return m.Migrate(version) })
}
