package jobs

// River hosts a worker process's drains (the loop they run, runDrains, is
// in runner.go), from the process's start to its end, so that nothing of a
// process outlives it:
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
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ordo-dev/ordo/jobs/fair"
	"github.com/ordo-dev/ordo/jobs/outage"
	"github.com/ordo-dev/ordo/tenants"
)

// Queue is the River queue of ordo's shared jobs: event deliveries and the
// periodic jobs (maintenance.go). Drains do not use it: each worker process
// runs its drains on River jobs of a queue of its own (RunnerArgs,
// below).
const Queue = "ordo"

// riverSchema is the schema of River's tables (sql/river.go migrates them).
const riverSchema = "ordo"

// RunnerArgs is a River job that drains conversations: it claims the next
// conversation its process's scheduler points it to, drains it, and goes on
// until RunnerLifetime or a stop. A worker process keeps Config.Workers of
// them running on a queue of its own, so River runs every drain and a
// conversation's wake-up costs no River job.
type RunnerArgs struct{}

// Kind is the River job kind of a runner.
func (RunnerArgs) Kind() string { return "ordo_runner" }

// RunnerLifetime bounds one runner job (its process starts another): far
// below River's rescue of jobs that run too long (one hour), so River never
// takes a live runner for a stuck one. A runner whose process died is
// swept away with its process's queue (below) long before.
const RunnerLifetime = 10 * time.Minute

// topUpInterval is how often, at most, a process checks that its runner
// jobs are all there (a runner that ended asks for its successor at once)
// and refreshes its runner queue (heartbeatInterval).
const topUpInterval = 5 * time.Second

// Runner is a worker process's share of the work: River running this
// process's drains, the scheduler choosing whose conversations they claim,
// and River's periodic jobs (maintenance.go) for all processes.
type Runner struct {
	cfg        Config
	logger     *slog.Logger
	pool       *pgxpool.Pool
	client     *river.Client[pgx.Tx]
	queue      string // this process's runner queue
	drainer    *Drainer
	sched      *scheduler
	reconciler *reconciler
	pruner     *Pruner
	events     *eventsWorker
	dispatcher *eventsDispatcher
	cancel     context.CancelFunc
	done       chan struct{}
	topUp      chan struct{}
	// claims counts this process's claims, claimsEmpty those that found
	// nothing to take (tests read them: a measure of runners woken for
	// nothing).
	claims, claimsEmpty atomic.Int64
	// batches counts the claims that took a batch (batch.go).
	batches atomic.Int64
	runners int // runner jobs kept: Workers plus the room's overdraft
}

// NewRunner builds a Runner; Start starts it.
func NewRunner(pool *pgxpool.Pool, cfg Config, ts *tenants.Store, vault *tenants.Vault, logger *slog.Logger) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Database == nil {
		cfg.Database = outage.NewWatch("postgres", outage.Config{}, logger)
	}
	if cfg.Schema == nil {
		cfg.Schema = NewSchemaWatch(logger)
	}
	// Runners: one per worker, and as many again as the room may be
	// overdrawn for urgent tenants (takeRoom): with every worker's runner
	// in a campaign's drains, someone must be there to claim for them.
	runners := cfg.Workers + fair.OverdraftFor(cfg.Workers)
	if need := int32(runners + 5); pool.Config().MaxConns < need {
		// Each running drain holds a connection (its lock); River and the
		// scheduler's listener need a few.
		return nil, fmt.Errorf("jobs: the pool allows %d connections; %d workers need at least %d (set pool_max_conns)", pool.Config().MaxConns, cfg.Workers, need)
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg:     cfg,
		logger:  logger,
		pool:    pool,
		queue:   runnerQueuePrefix + hex.EncodeToString(id[:]),
		drainer: newDrainer(cfg, pool, ts, vault, logger),
		sched: newScheduler(pool, cfg.FetchPollInterval, cfg.RefreshMin, cfg.TurnSlice,
			fair.Room{Free: cfg.Workers, Over: fair.OverdraftFor(cfg.Workers)}, runners, cfg.Database, logger),
		reconciler: &reconciler{pool: pool},
		pruner:     &Pruner{pool: pool, batch: cfg.PruneBatch, logger: logger},
		topUp:      make(chan struct{}, 1),
		runners:    runners,
	}
	r.drainer.turns = r.sched
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &runnerWorker{r: r}); err != nil {
		return nil, err
	}
	r.events = newEventsWorker(cfg.Events, cfg.Outbound, pool, ts, logger)
	r.events.stopping = r.drainer.stopping.Load
	if err := river.AddWorkerSafely(workers, r.events); err != nil {
		return nil, err
	}
	r.dispatcher = &eventsDispatcher{cfg: cfg.Events, pool: pool}
	periodicJobs, err := r.addMaintenance(workers)
	if err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: riverSchema,
		Queues: map[string]river.QueueConfig{
			r.queue: {MaxWorkers: runners},
			Queue:   {MaxWorkers: SharedWorkersDefault},
		},
		Workers:       workers,
		PeriodicJobs:  periodicJobs,
		FetchCooldown: 2 * time.Millisecond,
		// River finds its jobs by polling (PollOnly below), at most this
		// far apart whatever the scheduler's own poll.
		FetchPollInterval: min(cfg.FetchPollInterval, FetchPollIntervalDefault),
		// No LISTEN of River's. Before PostgreSQL 19 every NOTIFY wakes
		// every backend that listens in the database, on any channel, and
		// it reads the notification in a transaction of its own: River's
		// notifier in each process read each ordo_ready notification (one
		// per message that finds its conversation idle) only to drop it —
		// a transaction per message per process (`make bench` latency,
		// one process: 5.04 → 4.03 per message). River's jobs here are
		// long-lived runners, event deliveries and periodic jobs, which a
		// poll finds within FetchPollInterval; a new leader is elected
		// within 5 s of the old one's exit rather than at once.
		PollOnly:   true,
		JobTimeout: -1,
		// Finished jobs go by River's own cleaner (config.go).
		CompletedJobRetentionPeriod: CompletedJobRetention,
		CancelledJobRetentionPeriod: CancelledJobRetention,
		DiscardedJobRetentionPeriod: DiscardedJobRetention,
		// River's own loops retry against a database that is away as
		// often as ordo's would; their warnings then say nothing the
		// watch's two lines do not (outage.go).
		// Its chatter below riverLogLevel is left out (riverlog.go).
		Logger: slog.New(outage.QuietHandler{Handler: atLeast{Handler: logger.Handler(), level: riverLogLevel}, Watch: cfg.Database}).With(slog.String("component", "river")),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	r.client = client
	r.dispatcher.client = client
	return r, nil
}

// SharedWorkersDefault is how many jobs of the shared queue (Queue) one
// process runs at once.
const SharedWorkersDefault = 10

// Start starts draining. Cancelling ctx does not stop the runner (Stop
// does): River cancels every running job's context when the context given
// to its Start ends, and a drain cut off mid-call cannot record what it did.
func (r *Runner) Start(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if err := r.client.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { r.sched.listen(rctx) })
	wg.Go(func() { r.keepRunners(rctx) })
	go func() {
		defer close(r.done)
		wg.Wait()
	}()
	return nil
}

// countRunners counts this process's runner jobs that are not finished.
const countRunners = `SELECT count(*) FROM ordo.river_job WHERE queue = $1 AND finalized_at IS NULL`

// keepRunners keeps r.runners runner jobs on this process's queue, and the
// queue's row fresh (below): at the start, when a runner ends, and
// every heartbeatInterval.
func (r *Runner) keepRunners(ctx context.Context) {
	t := time.NewTicker(r.heartbeatInterval())
	defer t.Stop()
	for {
		err := r.heartbeat(ctx)
		if err == nil {
			err = r.addRunners(ctx)
		}
		if err != nil && ctx.Err() == nil && !r.waitedOut(err) {
			r.logger.WarnContext(ctx, "keep the runner jobs", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.topUp:
		}
	}
}

func (r *Runner) addRunners(ctx context.Context) error {
	if r.drainer.stopping.Load() {
		return nil
	}
	var n int
	if err := r.pool.QueryRow(ctx, countRunners, r.queue).Scan(&n); err != nil {
		return err
	}
	if n >= r.runners {
		return nil
	}
	params := make([]river.InsertManyParams, r.runners-n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: RunnerArgs{}, InsertOpts: &river.InsertOpts{Queue: r.queue, MaxAttempts: 1}}
	}
	_, err := r.client.InsertMany(ctx, params)
	return err
}

// Stop stops gracefully, as a deploy's SIGTERM asks: no new drain starts;
// running drains finish the step in flight, record it, yield their
// conversation (another worker goes on from the checkpoint) and release its
// lock. Stop waits for that up to Config.StopTimeout or until ctx ends (a
// second signal), whichever is first, then cancels what is still running
// (a hard stop: a call cut off there is settled as ambiguous by the next
// drain). Then it deletes this process's runner queue and jobs.
func (r *Runner) Stop(ctx context.Context) error {
	r.drainer.stopping.Store(true)
	r.sched.stop()
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	// Nothing of this process is left behind: its runner queue and jobs go
	// once River has stopped working them.
	defer r.removeQueue(ctx)
	soft, cancel := context.WithTimeout(ctx, r.cfg.StopTimeout)
	defer cancel()
	if err := r.client.Stop(soft); err == nil {
		return nil
	}
	r.logger.Warn("graceful stop did not finish in time; cancelling the drains still running",
		slog.Duration("stop_timeout", r.cfg.StopTimeout))
	hard, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), hardStopTimeout)
	defer cancelHard()
	return r.client.StopAndCancel(hard)
}

// hardStopTimeout bounds waiting for cancelled drains to return.
const hardStopTimeout = 5 * time.Second

// runnerWorker adapts a Runner's drain loop to River.
type runnerWorker struct {
	river.WorkerDefaults[RunnerArgs]
	r *Runner
}

func (w *runnerWorker) Work(ctx context.Context, job *river.Job[RunnerArgs]) error {
	defer func() {
		select {
		case w.r.topUp <- struct{}{}:
		default:
		}
	}()
	return w.r.runDrains(ctx, fmt.Sprintf("%s/%d", job.Queue, job.ID))
}

// Timeout: a runner bounds itself (RunnerLifetime).
func (w *runnerWorker) Timeout(*river.Job[RunnerArgs]) time.Duration { return -1 }

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
