package jobs

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// orphanQuery finds conversations with work but no row in the ready set,
// which only a bug or an operator's hand makes: ingest puts every idle
// conversation it accepts a message for in the set, and a drain that dies
// leaves its row behind, due again when its lease is over. It scans the
// conversations table (an index on it would stop the conversation row's
// updates from being HOT), so it runs every OrphanInterval.
const orphanQuery = `
SELECT c.id FROM ordo.conversations c
WHERE c.head_seq < c.last_seq AND c.halted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id)
LIMIT 1000`

const ensureDrain = `SELECT ordo.ensure_drain($1)`

// reconciler puts orphaned conversations back in the ready set: the work of
// the periodic ReconcileArgs job (maintenance.go). ensure_drain re-checks
// under the row lock, so two runs never double up.
type reconciler struct {
	pool *pgxpool.Pool
}

// once re-schedules what is orphaned now and says how many.
func (r *reconciler) once(ctx context.Context) (int, error) {
	rows, _ := r.pool.Query(ctx, orphanQuery)
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	n := 0
	for _, conv := range found {
		var added bool
		if err := r.pool.QueryRow(ctx, ensureDrain, conv).Scan(&added); err != nil {
			return n, err
		}
		if added {
			n++
		}
	}
	return n, nil
}
