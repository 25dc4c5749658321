package sql_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// TestSchemaChanged: what counts as a schema this build was not written
// for — a waited-out state — and what stays a failure of the statement.
func TestSchemaChanged(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("claim conversation: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{pg(pgerrcode.UndefinedColumn), true},
		{pg(pgerrcode.UndefinedTable), true},
		{pg(pgerrcode.UndefinedFunction), true},
		{pg(pgerrcode.DatatypeMismatch), true},
		{fmt.Errorf("ready: %w", ordosql.ErrNotServed), true},
		{pg(pgerrcode.UniqueViolation), false},
		{pg(pgerrcode.LockNotAvailable), false},
		{pg(pgerrcode.AdminShutdown), false}, // Postgres away: its own state
		{errors.New("column \"x\" does not exist"), false},
		{nil, false},
	} {
		if got := ordosql.SchemaChanged(tc.err); got != tc.want {
			t.Errorf("SchemaChanged(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}
