package engine

import (
	"context"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// Ready reports whether the database is reachable and migrated to the
// version this build expects: what GET /readyz answers.
func (e *Engine) Ready(ctx context.Context) error {
	return ordosql.CheckMigrated(ctx, e.pool)
}
