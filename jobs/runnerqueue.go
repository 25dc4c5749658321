package jobs

// A worker process's runner queue, from its start to its end, so that
// nothing of a process outlives it:
//
//   - The process runs its drains on River jobs (RunnerArgs) of a queue of
//     its own, ordo-run-<random>, and refreshes the queue's row
//     (river_queue.updated_at, the very write River's producer makes every
//     ten minutes) every heartbeatInterval.
//   - A graceful stop (Runner.Stop), once River has stopped, deletes the
//     queue's jobs, finished or not, and its row.
//   - A process that dies (kill -9, a lost host) leaves both behind: a
//     periodic job (SweepRunnersArgs, on River's leader) deletes every
//     runner queue not refreshed for Config.RunnerGoneAfter, with its jobs,
//     and runner jobs whose queue has no row. The sweeping process must
//     itself have seen Postgres up for RunnerGoneAfter (outage.Watch.UpFor):
//     right after an outage every queue is stale and every process silent.
//
// Deleting the rows of a process that is alive after all (cut off from
// Postgres longer than RunnerGoneAfter) is harmless: drains are guarded by
// their conversation's lock and fence, not by a job row; River completes a
// job whose row is gone as a no-op; the process's next heartbeat writes its
// queue row again and keepRunners inserts new runner jobs, which wait
// behind the running ones (the queue's MaxWorkers).

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river/riverdriver"
)

// RunnerGoneAfterDefault is Config.RunnerGoneAfter's default.
const RunnerGoneAfterDefault = time.Minute

// runnerQueuePrefix begins every process's runner queue name.
const runnerQueuePrefix = "ordo-run-"

// heartbeatInterval is how often a process refreshes its runner queue's
// row (and checks its runner jobs are all there): often enough that a live
// process is never taken for gone.
func (r *Runner) heartbeatInterval() time.Duration {
	return min(topUpInterval, r.cfg.RunnerGoneAfter/6)
}

// heartbeat writes this process's runner queue row, or refreshes it: River's
// own upsert (the producer's queue report).
func (r *Runner) heartbeat(ctx context.Context) error {
	_, err := r.client.Driver().GetExecutor().QueueCreateOrSetUpdatedAt(ctx, &riverdriver.QueueCreateOrSetUpdatedAtParams{
		Metadata: []byte("{}"),
		Name:     r.queue,
		Schema:   riverSchema,
	})
	if err != nil {
		return fmt.Errorf("refresh the runner queue: %w", err)
	}
	return nil
}

// sweepRunnerQueues deletes the runner queues (names LIKE $2) not
// refreshed for $1 milliseconds and their jobs, and the runner jobs of queues that have no row (removed by
// River's queue cleaner, or left by a stop cut short); it returns how many
// of each. A heartbeat racing with it waits for the queue row and wins:
// the row, updated, no longer matches.
const sweepRunnerQueues = `
WITH gone AS (
    DELETE FROM ordo.river_queue q
    WHERE q.name LIKE $2 AND q.updated_at < now() - $1::float8 * interval '1 millisecond'
    RETURNING q.name
), jobs AS (
    DELETE FROM ordo.river_job j
    WHERE j.kind = 'ordo_runner'
      AND (j.queue IN (SELECT name FROM gone)
           OR NOT EXISTS (SELECT 1 FROM ordo.river_queue q WHERE q.name = j.queue))
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM jobs)`

// sweepRunners is the work of a SweepRunnersArgs job.
func (r *Runner) sweepRunners(ctx context.Context) error {
	gone := r.cfg.RunnerGoneAfter
	if r.cfg.Database.UpFor() < gone {
		return nil // everyone may have been cut off: not heard from is not gone
	}
	var queues, jobs int
	if err := r.pool.QueryRow(ctx, sweepRunnerQueues, float64(gone.Milliseconds()), runnerQueuePrefix+"%").Scan(&queues, &jobs); err != nil {
		return err
	}
	if queues > 0 || jobs > 0 {
		r.logger.InfoContext(ctx, "removed the runner queues and jobs of worker processes that are gone",
			slog.Int("queues", queues), slog.Int("jobs", jobs), slog.Duration("silent_for", gone))
	}
	return nil
}

// deleteRunnerQueue deletes a stopped process's runner queue and its jobs.
const deleteRunnerQueue = `
WITH q AS (DELETE FROM ordo.river_queue WHERE name = $1)
DELETE FROM ordo.river_job WHERE queue = $1`

// removeQueue deletes this process's runner queue and jobs once River has
// stopped. Postgres away: the sweep of another process does it later.
func (r *Runner) removeQueue(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeQueueTimeout)
	defer cancel()
	if _, err := r.pool.Exec(ctx, deleteRunnerQueue, r.queue); err != nil {
		r.logger.WarnContext(ctx, "remove this process's runner queue (a sweep removes it later)",
			slog.String("queue", r.queue), slog.String("error", err.Error()))
	}
}

// removeQueueTimeout bounds removeQueue.
const removeQueueTimeout = 5 * time.Second
