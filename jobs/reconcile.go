package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// strandedQuery finds conversations whose drain will not come on its own: the
// job they count on is gone or finished, or it is "running" on a worker that
// died (no session holds the conversation's lock, long after it started).
// It reads only conversations that have a drain (conversations_drain_idx).
const strandedQuery = `
SELECT c.id, c.drain_job_id FROM ordo.conversations c
LEFT JOIN ordo.river_job j ON j.id = c.drain_job_id
WHERE c.drain_job_id IS NOT NULL AND (
    j.id IS NULL
    OR j.state IN ('completed', 'cancelled', 'discarded')
    OR (j.state = 'running' AND j.attempted_at < now() - make_interval(secs => $1)
        AND NOT EXISTS (
            SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid::bigint = $2 AND l.objid::bigint = c.id % 2147483647)))
LIMIT 1000`

// orphanQuery finds conversations with work but no drain at all, which only
// a bug or an operator's hand makes: ingest always claims a drain for an
// idle conversation. It scans the table (an index on it would stop the
// conversation row's updates from being HOT), so it runs every
// OrphanInterval, not every ReconcileInterval.
const orphanQuery = `
SELECT c.id, NULL::bigint FROM ordo.conversations c
WHERE c.drain_job_id IS NULL AND c.head_seq < c.last_seq AND c.halted_at IS NULL
LIMIT 1000`

const replaceDrain = `SELECT ordo.ensure_drain($1, $2)`

// reconciler re-schedules stranded conversations. Every worker process runs
// one; ensure_drain re-checks under the row lock, so they never double up.
type reconciler struct {
	pool     *pgxpool.Pool
	interval time.Duration
	after    time.Duration
	orphans  time.Duration // how often orphanQuery runs
	logger   *slog.Logger
	// lastOrphans is when orphanQuery last ran; only loop's goroutine uses it.
	lastOrphans time.Time
}

func (r *reconciler) loop(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := r.once(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "reconcile stranded conversations", slog.String("error", err.Error()))
			} else if n > 0 {
				r.logger.InfoContext(ctx, "re-scheduled stranded conversations", slog.Int("count", n))
			}
		}
	}
}

// once re-schedules what is stranded now (and, every r.orphans, orphans) and
// says how many.
func (r *reconciler) once(ctx context.Context) (int, error) {
	found, err := r.find(ctx, strandedQuery, r.after.Seconds(), lockNamespace)
	if err != nil {
		return 0, err
	}
	if time.Since(r.lastOrphans) >= r.orphans {
		orphans, err := r.find(ctx, orphanQuery)
		if err != nil {
			return 0, err
		}
		r.lastOrphans = time.Now()
		found = append(found, orphans...)
	}
	n := 0
	for _, s := range found {
		var job *int64
		if err := r.pool.QueryRow(ctx, replaceDrain, s.conv, s.job).Scan(&job); err != nil {
			return n, err
		}
		if job != nil {
			n++
		}
	}
	return n, nil
}

// stranded is a conversation to re-schedule and the job it counted on.
type stranded struct {
	conv int64
	job  *int64
}

func (r *reconciler) find(ctx context.Context, query string, args ...any) ([]stranded, error) {
	rows, _ := r.pool.Query(ctx, query, args...)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (stranded, error) {
		var s stranded
		err := row.Scan(&s.conv, &s.job)
		return s, err
	})
}
