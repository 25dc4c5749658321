package jobs

// ordo's background work as River periodic jobs: pruning (prune.go),
// reconciling orphaned conversations (reconcile.go), giving due event
// streams a delivery job (events.go) and sweeping away the runner jobs and
// queues of processes that are gone (river.go).
//
//   - River's leader (one process of all) inserts each job on the shared
//     queue (Queue) every period, and once at its start (RunOnStart); any
//     process works it.
//   - Each job is unique per period among the unfinished ones (UniqueOpts
//     ByPeriod): a new leader's first insert does not double the period's
//     job, and a job left "running" by a killed process holds back no more
//     than one period. The work itself is safe to overlap (the pruner's
//     advisory lock, ensure_drain's re-check under the row lock, the events
//     jobs' own uniqueness, the sweep's staleness test), so a run longer
//     than its period costs nothing but time.
//   - One attempt: a failed run is not retried, the next period runs again.
//     A run that fails because Postgres is away tells the process's
//     outage.Watch and ends without error, so an outage logs the watch's two
//     lines, not one per period; any other error is logged and returned
//     (River records it).

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// PruneArgs is the periodic job that prunes messages past their tenant's
// retention (Config.PruneInterval).
type PruneArgs struct{}

// Kind is the River job kind of pruning.
func (PruneArgs) Kind() string { return "ordo_prune" }

// ReconcileArgs is the periodic job that puts conversations with work and
// no drain back in the ready set (Config.OrphanInterval).
type ReconcileArgs struct{}

// Kind is the River job kind of reconciling.
func (ReconcileArgs) Kind() string { return "ordo_reconcile" }

// DispatchEventsArgs is the periodic job that gives every event stream
// whose head is due a delivery job (EventsConfig.PollInterval).
type DispatchEventsArgs struct{}

// Kind is the River job kind of event dispatch.
func (DispatchEventsArgs) Kind() string { return "ordo_dispatch_events" }

// SweepRunnersArgs is the periodic job that deletes the runner jobs and
// queues of worker processes that are gone (Config.RunnerGoneAfter).
type SweepRunnersArgs struct{}

// Kind is the River job kind of the runner sweep.
func (SweepRunnersArgs) Kind() string { return "ordo_sweep_runners" }

// PeriodMin is the shortest period of a periodic job: River's least unique
// period. A shorter interval configured is run at this one.
const PeriodMin = time.Second

// Timeouts of the periodic jobs: pruning goes batch by batch and goes on
// from where it stopped at the next period.
const (
	maintenanceTimeout = 5 * time.Minute
	pruneTimeout       = 30 * time.Minute
)

// unfinishedStates are a unique job's rivals: the unfinished ones (River's
// required states and retryable). A finished job does not hold back the next.
var unfinishedStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateScheduled, rivertype.JobStateRetryable,
}

// periodic is the River periodic job inserting args every interval (at
// least PeriodMin) on the shared queue, unique per period.
func periodic(args river.JobArgs, interval time.Duration) *river.PeriodicJob {
	interval = max(interval, PeriodMin)
	return river.NewPeriodicJob(river.PeriodicInterval(interval), func() (river.JobArgs, *river.InsertOpts) {
		return args, &river.InsertOpts{
			Queue: Queue, MaxAttempts: 1,
			UniqueOpts: river.UniqueOpts{ByPeriod: interval, ByState: unfinishedStates},
		}
	}, &river.PeriodicJobOpts{RunOnStart: true})
}

// periodicWorker works one kind of periodic job: run once.
type periodicWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	what    string // what run does, for its failure's log line
	run     func(ctx context.Context) error
	timeout time.Duration
	// waitedOut says an error is a state of the process's watches
	// (Runner.waitedOut), logged once by them.
	waitedOut func(error) bool
	logger    *slog.Logger
}

func (w *periodicWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	err := w.run(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if w.waitedOut(err) {
		return nil // the watch says it once; the next period tries again
	}
	w.logger.WarnContext(ctx, w.what, slog.String("error", err.Error()))
	return err
}

// Timeout bounds one run.
func (w *periodicWorker[T]) Timeout(*river.Job[T]) time.Duration { return w.timeout }

// addMaintenance registers the periodic jobs' workers (every process works
// them) and returns the periodic jobs this process inserts when it is
// River's leader.
func (r *Runner) addMaintenance(workers *river.Workers) ([]*river.PeriodicJob, error) {
	waitedOut, logger := r.waitedOut, r.logger
	err := river.AddWorkerSafely(workers, &periodicWorker[PruneArgs]{
		what: "prune messages", timeout: pruneTimeout, waitedOut: waitedOut, logger: logger,
		run: func(ctx context.Context) error {
			n, err := r.pruner.Once(ctx)
			if n.Messages > 0 {
				logger.InfoContext(ctx, "pruned messages past retention",
					slog.Int("messages", n.Messages), slog.Int("steps", n.Steps), slog.Int("dead_letters", n.DeadLetters))
			}
			return err
		},
	})
	if err == nil {
		err = river.AddWorkerSafely(workers, &periodicWorker[ReconcileArgs]{
			what: "reconcile orphaned conversations", timeout: maintenanceTimeout, waitedOut: waitedOut, logger: logger,
			run: func(ctx context.Context) error {
				n, err := r.reconciler.once(ctx)
				if n > 0 {
					logger.WarnContext(ctx, "re-scheduled conversations that had work and no drain", slog.Int("count", n))
				}
				return err
			},
		})
	}
	if err == nil {
		err = river.AddWorkerSafely(workers, &periodicWorker[DispatchEventsArgs]{
			what: "dispatch events", timeout: maintenanceTimeout, waitedOut: waitedOut, logger: logger,
			run: func(ctx context.Context) error { return r.dispatcher.dispatch(ctx) },
		})
	}
	if err == nil {
		err = river.AddWorkerSafely(workers, &periodicWorker[SweepRunnersArgs]{
			what: "sweep the runners of gone processes", timeout: maintenanceTimeout, waitedOut: waitedOut, logger: logger,
			run: func(ctx context.Context) error { return r.sweepRunners(ctx) },
		})
	}
	if err != nil {
		return nil, err
	}
	jobs := []*river.PeriodicJob{
		periodic(ReconcileArgs{}, r.cfg.OrphanInterval),
		periodic(DispatchEventsArgs{}, r.cfg.Events.PollInterval),
		periodic(SweepRunnersArgs{}, r.cfg.RunnerGoneAfter/2),
	}
	if r.cfg.PruneInterval > 0 {
		jobs = append(jobs, periodic(PruneArgs{}, r.cfg.PruneInterval))
	}
	return jobs, nil
}
