package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ordo-dev/ordo/jobs/fair"
	"github.com/ordo-dev/ordo/jobs/outage"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

// Queue is the River queue of ordo's shared jobs: event deliveries and the
// periodic jobs (maintenance.go). Drains do not use it: each worker process
// runs its drains on River jobs of a queue of its own (RunnerArgs,
// runnerqueue.go).
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
// swept away with its process's queue (runnerqueue.go) long before.
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
	// lastBacklog is when a batch claim of this process last left due
	// conversations of its tenant behind (unix nanoseconds).
	lastBacklog atomic.Int64
	room        *room
	runners     int // runner jobs kept: Workers plus the room's overdraft
}

// batchRecent is how long after a batch claim left due conversations
// behind runners still wait for room for half a batch (takeRoom).
const batchRecent = time.Second

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
		cfg:        cfg,
		logger:     logger,
		pool:       pool,
		queue:      runnerQueuePrefix + hex.EncodeToString(id[:]),
		drainer:    newDrainer(cfg, pool, ts, vault, logger),
		sched:      newScheduler(pool, cfg.FetchPollInterval, cfg.RefreshMin, cfg.TurnSlice, runners, cfg.Database, logger),
		reconciler: &reconciler{pool: pool},
		pruner:     &Pruner{pool: pool, batch: cfg.PruneBatch, logger: logger},
		topUp:      make(chan struct{}, 1),
		room:       newRoom(cfg.Workers, fair.OverdraftFor(cfg.Workers)),
		runners:    runners,
	}
	r.drainer.turns = r.sched
	r.sched.onDue = r.room.poke
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
		Workers:           workers,
		PeriodicJobs:      periodicJobs,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: cfg.FetchPollInterval,
		JobTimeout:        -1,
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
// queue's row fresh (runnerqueue.go): at the start, when a runner ends, and
// every heartbeatInterval.
func (r *Runner) keepRunners(ctx context.Context) {
	t := time.NewTicker(r.heartbeatInterval())
	defer t.Stop()
	for {
		err := r.heartbeat(ctx)
		if err == nil {
			err = r.addRunners(ctx)
		}
		if err != nil && ctx.Err() == nil && !r.cfg.Database.Report(err, ordosql.Unavailable) {
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
	r.sched.wakeAll()
	r.room.stop()
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

// runDrains is one runner: claim, drain, repeat, until RunnerLifetime or
// a stop. It keeps its connection while it finds work (the claim and the
// release of the previous drain's slot ride in one round trip) and hands it
// back when it waits.
func (r *Runner) runDrains(ctx context.Context, name string) error {
	d := r.drainer
	end := time.Now().Add(RunnerLifetime)
	var (
		conn *pgxpool.Conn
		held *slotHold // the previous drain's slot, released by the next claim
	)
	drop := func(usable bool) {
		if conn == nil {
			return
		}
		if usable && held != nil {
			_, err := conn.Exec(context.WithoutCancel(ctx), releaseSlot, held.slot, held.tenant)
			usable = err == nil
		}
		held = nil
		if usable {
			conn.Release()
		} else {
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
		}
		conn = nil
	}
	defer func() { drop(true) }()
	for !d.stopping.Load() && time.Now().Before(end) && ctx.Err() == nil {
		room, t, urgent := r.takeRoom(ctx)
		if room == 0 {
			continue // stopping
		}
		ok := urgent
		if !urgent {
			t, ok = r.sched.pick(ctx)
		}
		if !ok {
			r.room.give(room)
			drop(true)
			r.sched.wait(ctx)
			continue
		}
		if conn == nil {
			c, err := r.pool.Acquire(ctx)
			if err != nil {
				r.room.give(room)
				if !r.cfg.Database.Report(err, ordosql.Unavailable) {
					r.logger.WarnContext(ctx, "runner: acquire a connection", slog.String("error", err.Error()))
				}
				r.sched.pause(ctx, r.cfg.FetchPollInterval)
				continue
			}
			conn = c
		}
		var phone *string
		if p, ok := d.creds.phone(t.Tenant); ok {
			phone = &p
		} else if t.Cap == 0 {
			phone = d.warmCredential(ctx, conn, t.Tenant)
		}
		var bt *batch
		if t.Cap == 0 && phone != nil {
			bt = &batch{tenant: t.Tenant, max: room}
		}
		claimed := time.Now()
		s, st, err := claimAndOpen(ctx, conn, t, d.cfg.Lease.Milliseconds(), phone, held, bt, true)
		if err != nil {
			// The batch failed: what it locked is unknown, so the
			// connection (and every lock on it) goes.
			r.room.give(room)
			held = nil
			drop(false)
			if ctx.Err() == nil {
				if !r.cfg.Database.Report(err, ordosql.Unavailable) {
					r.logger.WarnContext(ctx, "claim a conversation", slog.Int64("tenant_id", t.Tenant), slog.String("error", err.Error()))
				}
				r.sched.pause(ctx, r.cfg.FetchPollInterval)
			}
			continue
		}
		held = nil
		r.claims.Add(1)
		if bt != nil && len(bt.convs) > 0 {
			r.room.give(room - len(bt.convs))
			r.batches.Add(1)
			d.cfg.Metrics.BatchClaimed()
			if bt.more {
				r.lastBacklog.Store(time.Now().UnixNano())
			}
			if !r.drainBatch(ctx, conn, bt, claimed, name) { // gives back the batch's room
				drop(false)
			}
			r.sched.released(t.Tenant, false)
			continue
		}
		r.room.give(room - 1)
		if s == nil {
			r.room.give(1)
			r.claimsEmpty.Add(1)
			r.sched.missed(t.Tenant, claimed)
			continue
		}
		r.sched.passOn(t.Tenant, st.more)
		held = s.slot
		usable := r.drainClaimed(ctx, s, st, name)
		r.room.give(1)
		if !usable {
			held = nil
			drop(false)
		}
		// A slot of a capped tenant is about to free up (the next claim
		// releases it).
		r.sched.released(t.Tenant, held != nil)
	}
	return nil
}

// takeRoom waits for room for a claim (fair.Take): for a batch, or at
// least for one drain. While batches leave due conversations behind (a
// backlog) a runner waits a moment (TurnSlice) for room for half a batch
// before it takes less: room freed gathers into full batches instead of
// scattering into batches of one or two. A tenant that waits and has
// nothing running here gets room beyond Workers (urgent: t is its turn).
func (r *Runner) takeRoom(ctx context.Context) (n int, t fair.Turn, urgent bool) {
	want := 1
	if time.Since(time.Unix(0, r.lastBacklog.Load())) < batchRecent {
		want = max(1, r.cfg.BatchSize/2)
	}
	var late <-chan time.Time
	// A look at the ready set every poll interval even if nothing wakes
	// this runner: a lost notification must not leave a waiting tenant
	// behind a full room (fair.Take reads it then).
	poll := time.NewTicker(r.cfg.FetchPollInterval)
	defer poll.Stop()
	for {
		changed, stopped := r.room.changed()
		if stopped || ctx.Err() != nil {
			return 0, fair.Turn{}, false
		}
		if n, t, urgent := r.sched.take(ctx, r.room, r.cfg.BatchSize, want); n > 0 {
			return n, t, urgent
		}
		if late == nil && want > 1 {
			timer := time.NewTimer(r.cfg.TurnSlice)
			defer timer.Stop()
			late = timer.C
		}
		select {
		case <-changed:
		case <-late:
			want = 1
		case <-poll.C:
		case <-ctx.Done():
		}
	}
}

// room is the process's fair.Room, shared by its runners, with the
// channel that tells the runners waiting for room that it changed.
type room struct {
	mu sync.Mutex
	fair.Room
	stopped bool
	freed   chan struct{} // closed (and replaced) when room is given back, or poked
}

func newRoom(n, over int) *room {
	return &room{Room: fair.Room{Free: n, Over: over}, freed: make(chan struct{})}
}

// changed is closed when room is given back or poked; stopped says the
// room is stopped.
func (r *room) changed() (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.freed, r.stopped
}

// poke wakes the runners waiting for room (a conversation became due: a
// tenant may be urgent).
func (r *room) poke() { r.update(func() {}) }

// grab takes up to most when at least want is free (fair.Room.Grab),
// unless the room is stopped.
func (r *room) grab(most, want int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return 0
	}
	return r.Grab(most, want)
}

// give returns n taken by take or grab.
func (r *room) give(n int) {
	if n > 0 {
		r.update(func() { r.Give(n) })
	}
}

// stop makes every take fail and wakes the runners waiting (a stop).
func (r *room) stop() { r.update(func() { r.stopped = true }) }

// update changes the room under its lock and wakes the runners waiting.
func (r *room) update(change func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	change()
	close(r.freed)
	r.freed = make(chan struct{})
}

const releaseSlot = `SELECT pg_advisory_unlock(-1 - $1::int, $2::int)`

// drainClaimed drains what s claimed and ends the session; false when the
// connection cannot be used again.
func (r *Runner) drainClaimed(ctx context.Context, s *session, st convState, name string) bool {
	end, err := r.drainer.drain(ctx, s, st, name)
	return r.end(ctx, s, end, err)
}

// end ends a drain run as it ended (end, err) and the session with it;
// false when the connection cannot be used again.
func (r *Runner) end(ctx context.Context, s *session, end ended, err error) bool {
	d := r.drainer
	switch {
	case err == nil && end.parked:
		r.sched.dueIn(end.wait)
	case err == nil && end.park:
		if perr := s.park(ctx, end.wait); perr != nil && !errors.Is(perr, ErrFenced) {
			d.logger.WarnContext(ctx, "park conversation", slog.Int64("conversation", s.conv), slog.String("error", perr.Error()))
		}
		r.sched.dueIn(end.wait)
	case err != nil && !s.broken:
		// An infrastructure error on a connection that still works: try
		// again after a pause rather than after the lease.
		if perr := s.park(ctx, d.cfg.DrainErrorDelay); perr != nil && !errors.Is(perr, ErrFenced) {
			d.logger.WarnContext(ctx, "park conversation", slog.Int64("conversation", s.conv), slog.String("error", perr.Error()))
		}
		fallthrough
	case err != nil:
		if ctx.Err() == nil {
			d.logger.WarnContext(ctx, "drain failed", slog.Int64("conversation", s.conv), slog.String("error", err.Error()))
		}
	}
	return s.close()
}
