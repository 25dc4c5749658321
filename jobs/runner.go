package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ordo-dev/ordo/tenants"
)

// Runner is a worker process's share of the work: a River client draining
// conversations, and the reconciler.
type Runner struct {
	cfg        Config
	logger     *slog.Logger
	client     *river.Client[pgx.Tx]
	drainer    *Drainer
	reconciler *reconciler
	pruner     *Pruner
	interval   time.Duration // the pruner's; negative: no pruner here
	cancel     context.CancelFunc
	done       chan struct{}
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
	if need := int32(cfg.Workers + 5); pool.Config().MaxConns < need {
		// Each running drain holds a connection (its lock); River needs a few.
		return nil, fmt.Errorf("jobs: the pool allows %d connections; %d workers need at least %d (set pool_max_conns)", pool.Config().MaxConns, cfg.Workers, need)
	}
	d := newDrainer(cfg, pool, ts, vault, logger)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &drainWorker{d: d}); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            "ordo",
		Queues:            map[string]river.QueueConfig{Queue: {MaxWorkers: cfg.Workers}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond, // River's 100ms default would add up to 100ms per message
		FetchPollInterval: cfg.FetchPollInterval,
		JobTimeout:        -1,
		// Finished drain jobs go by River's own cleaner (config.go).
		CompletedJobRetentionPeriod: CompletedJobRetention,
		CancelledJobRetentionPeriod: CancelledJobRetention,
		DiscardedJobRetentionPeriod: DiscardedJobRetention,
		Logger:                      logger.With(slog.String("component", "river")),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &Runner{
		cfg:        cfg,
		logger:     logger,
		client:     client,
		drainer:    d,
		reconciler: &reconciler{pool: pool, interval: cfg.ReconcileInterval, after: cfg.StrandedAfter, orphans: cfg.OrphanInterval, logger: logger},
		pruner:     NewPruner(pool, cfg.PruneBatch, logger),
		interval:   cfg.PruneInterval,
	}, nil
}

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
	wg.Go(func() { r.reconciler.loop(rctx) })
	if r.interval > 0 {
		wg.Go(func() { r.pruner.loop(rctx, r.interval) })
	}
	go func() {
		defer close(r.done)
		wg.Wait()
	}()
	return nil
}

// Stop stops gracefully, as a deploy's SIGTERM asks: no new drain starts;
// running drains finish the step in flight, record it, yield their
// conversation (another worker goes on from the checkpoint) and release its
// lock. Stop waits for that up to Config.StopTimeout or until ctx ends (a
// second signal), whichever is first, then cancels what is still running
// (a hard stop: a call cut off there is settled as ambiguous by the next
// drain).
func (r *Runner) Stop(ctx context.Context) error {
	r.drainer.stopping.Store(true)
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
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
